//! A storage that refuses stale writers: a value in Redis (on a node outside
//! the lock set) updated only with a fencing token at least as large as the
//! last one it accepted.

/// Writes `data` if `token` is at least the last accepted token.
const WRITE: &str = r#"local last = tonumber(redis.call("get", KEYS[2]) or "0") or 0
if tonumber(ARGV[1]) < last then return 0 end
redis.call("set", KEYS[2], ARGV[1])
redis.call("set", KEYS[1], ARGV[2])
return 1"#;

/// The fenced value `name` on the node at `url`.
#[derive(Debug, Clone)]
pub struct FencedStore {
    url: String,
    name: String,
}

impl FencedStore {
    pub fn new(url: &str, name: &str) -> Self {
        FencedStore {
            url: url.to_owned(),
            name: name.to_owned(),
        }
    }

    fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str())
            .and_then(|c| c.get_connection_with_timeout(std::time::Duration::from_secs(5)))
            .expect("store connection")
    }

    /// Writes with a fencing token; false if a newer token was seen.
    pub fn write(&self, token: u64, data: &str) -> bool {
        let accepted: i64 = redis::cmd("EVAL")
            .arg(WRITE)
            .arg(2)
            .arg(&self.name)
            .arg(format!("{}:token", self.name))
            .arg(token)
            .arg(data)
            .query(&mut self.conn())
            .expect("fenced write");
        accepted == 1
    }

    /// Writes without a token (what a store does without fencing).
    pub fn write_unfenced(&self, data: &str) {
        let _: () = redis::cmd("SET")
            .arg(&self.name)
            .arg(data)
            .query(&mut self.conn())
            .expect("write");
    }

    pub fn read(&self) -> Option<String> {
        redis::cmd("GET")
            .arg(&self.name)
            .query(&mut self.conn())
            .expect("read")
    }
}
