//! Queues of waiters and wake-up subscriptions as the nodes see them, and
//! the client's subscriber threads as this process sees them.

use super::{Cluster, Node};

/// How many waiters are queued for `resource` on `node` (only its gate
/// node keeps a queue).
pub fn queued(node: &Node, resource: &str) -> usize {
    node.query(redis::cmd("ZCARD").arg(format!("redlock-queue:{resource}")))
}

/// How many clients listen for wake-ups on `node`.
pub fn wake_listeners(node: &Node) -> usize {
    let channels: Vec<String> =
        node.query(redis::cmd("PUBSUB").arg("CHANNELS").arg("redlock-wake:*"));
    channels.len()
}

/// Whether `count` waiters are queued for `resource` on its gate node, and
/// that node delivers wake-ups (a release now wakes the first of them).
pub fn waiting(cluster: &Cluster, resource: &str, count: usize) -> bool {
    cluster
        .nodes
        .iter()
        .any(|n| queued(n, resource) == count && wake_listeners(n) > 0)
}

/// How many `PUBLISH`es every node ran together (scripts' included).
pub fn publishes(cluster: &Cluster) -> u64 {
    cluster.nodes.iter().map(|n| n.calls("publish")).sum()
}

/// Subscriber connections open on any node.
pub fn subscriber_connections(cluster: &Cluster) -> usize {
    cluster
        .nodes
        .iter()
        .map(|n| {
            let list: String = n.query(redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub"));
            list.lines().count()
        })
        .sum()
}

/// Subscriber threads of this process (named `redlock-notify-N`).
pub fn subscriber_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task (Linux)")
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|n| n.starts_with("redlock-notif"))
        })
        .count()
}

/// Every wake-up `node` publishes from now on, as the queue member it woke
/// (`"{client id}:{ticket}"`), recorded by a thread until dropped.
pub struct WakeRecorder {
    woken: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WakeRecorder {
    /// Subscribed to every wake channel of `node` when this returns.
    pub fn start(node: &Node) -> WakeRecorder {
        use std::sync::atomic::Ordering;
        let woken = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut conn = node.conn();
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let thread = {
            let (woken, stop) = (woken.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut sub = conn.as_pubsub();
                sub.psubscribe("redlock-wake:*").expect("PSUBSCRIBE");
                sub.set_read_timeout(Some(std::time::Duration::from_millis(50)))
                    .expect("read timeout");
                ready_tx.send(()).expect("recorder started");
                while !stop.load(Ordering::SeqCst) {
                    let msg = match sub.get_message() {
                        Ok(msg) => msg,
                        Err(err) if err.is_timeout() => continue,
                        Err(err) => panic!("the wake recorder's subscription failed: {err}"),
                    };
                    let client = msg
                        .get_channel_name()
                        .strip_prefix("redlock-wake:")
                        .unwrap_or_default()
                        .to_owned();
                    let ticket: String = msg.get_payload().unwrap_or_default();
                    woken.lock().unwrap().push(format!("{client}:{ticket}"));
                }
            })
        };
        ready
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the recorder subscribed");
        WakeRecorder {
            woken,
            stop,
            thread: Some(thread),
        }
    }

    /// The members woken so far, in order.
    pub fn woken(&self) -> Vec<String> {
        self.woken.lock().unwrap().clone()
    }
}

impl Drop for WakeRecorder {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
