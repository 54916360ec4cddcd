//! Subscriber threads and connections: none before the first wait, one per
//! node however many resources are waited on, gone once nobody waits.
//! It holds the process's turn (`crate::turn`), so no other test's
//! threads are counted.

use std::time::Duration;

use crate::harness::pubsub::{self, subscriber_connections, subscriber_threads};
use crate::harness::{Cluster, client_threads, settles, threads_per_client};

const TTL: Duration = Duration::from_secs(10);

#[test]
fn subscribers_stay_one_per_node_however_many_resources_and_close_when_idle() {
    let _turn = crate::turn();
    let cluster = Cluster::start(5);
    let before = client_threads();
    let holder = crate::harness::client(cluster.urls());
    let waiter = crate::harness::builder(cluster.urls())
        .retry_delay(Duration::from_millis(400))
        .build()
        .unwrap();
    let baseline = before + 2 * threads_per_client(5);
    settles("both clients' threads started", || {
        client_threads() == baseline
    });
    const RESOURCES: usize = 40;
    let guards: Vec<_> = (0..RESOURCES)
        .map(|i| holder.lock(&format!("many:{i}"), TTL).unwrap())
        .collect();
    assert_eq!(subscriber_threads(), 0, "nobody waited yet");
    assert_eq!(subscriber_connections(&cluster), 0);
    std::thread::scope(|scope| {
        let waiting: Vec<_> = (0..RESOURCES)
            .map(|i| {
                let waiter = &waiter;
                scope.spawn(move || {
                    waiter
                        .lock_for(&format!("many:{i}"), TTL, Duration::from_secs(60))
                        .map(drop)
                })
            })
            .collect();
        settles("every resource waited for", || {
            (0..RESOURCES).all(|i| pubsub::waiting(&cluster, &format!("many:{i}"), 1))
        });
        assert_eq!(subscriber_threads(), 5, "one subscriber thread per node");
        assert_eq!(
            subscriber_connections(&cluster),
            5,
            "one subscriber connection per node"
        );
        drop(guards);
        for handle in waiting {
            handle.join().unwrap().expect("acquired");
        }
    });
    settles("idle subscriber connections closed", || {
        subscriber_connections(&cluster) == 0
    });
    settles("subscriber threads gone", || subscriber_threads() == 0);
    assert_eq!(client_threads(), baseline, "only the workers are left");
}
