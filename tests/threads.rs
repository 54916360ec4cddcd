//! The client's thread count is fixed at build time: no thread per call.
//! (One test in this binary, so no other test's threads are counted.)

mod harness;

use std::time::Duration;

use harness::Cluster;
use redlock_sync::Redlock;

fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task (Linux)")
        .count()
}

#[test]
fn locking_spawns_no_threads_and_dropping_the_client_stops_its_workers() {
    let cluster = Cluster::start(5);
    let before = thread_count();
    let redlock = Redlock::new(cluster.urls()).unwrap();
    let started = thread_count();
    // One worker and one connection helper per node.
    assert_eq!(started - before, 10, "threads per client");
    for i in 0..200 {
        let mut guard = redlock
            .lock(&format!("res:{i}"), Duration::from_secs(5))
            .unwrap();
        guard.extend(Duration::from_secs(5)).unwrap();
        drop(guard);
        assert!(
            redlock
                .try_lock("res:0", Duration::from_secs(5))
                .unwrap()
                .is_some()
        );
    }
    assert_eq!(thread_count(), started);
    drop(redlock);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while thread_count() > before {
        assert!(
            std::time::Instant::now() < deadline,
            "worker threads outlived the client"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
