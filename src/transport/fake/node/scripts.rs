//! The scripts without a queue or an election, and what they share: a
//! call's context (`KEYS`, `ARGV`, the node's time) and `lib_fence.lua`,
//! `lib_slots.lua`. Each function is the script of its name, line for line.

use redis::Value;

use super::data::{Bound, Keys, Reply};
use super::reply::{bulk, error};

/// One script's call: the node's keys and wake-ups, its `KEYS` and `ARGV`
/// (both counted from 1, as in Lua), and the node's time.
pub(super) struct Call<'a> {
    pub(super) k: &'a mut Keys,
    pub(super) wakes: &'a mut Vec<String>,
    pub(super) keys: &'a [String],
    pub(super) argv: &'a [String],
    pub(super) now: u64,
    /// How long a place in a queue counts, ms.
    pub(super) alive: i64,
}

impl<'a> Call<'a> {
    /// Runs the script named `script`.
    pub(super) fn run(&mut self, script: &str) -> Reply<Value> {
        match script {
            "release" => self.release(),
            "extend" => self.extend(),
            "acquire_all" => self.acquire_all(),
            "release_all" => self.release_all(),
            "extend_all" => self.extend_all(),
            "acquire_fenced" => {
                let n = self.number(3);
                self.acquire_fenced(n)
            }
            "slot_acquire" => self.slot_acquire(),
            "slot_acquire_fenced" => self.slot_acquire_fenced(),
            "read_acquire" => self.read_acquire(),
            "read_extend" => self.read_extend(),
            "read_release" => self.read_release(),
            "write_acquire" => self.write_acquire(),
            "inspect" => self.inspect(),
            "force_release" => self.force_release(),
            "no" => Ok(Value::Int(0)),
            _ => self.run_queued(script),
        }
    }

    /// `KEYS[i]`.
    pub(super) fn key(&self, i: usize) -> &'a str {
        let at = i.checked_sub(1).and_then(|i| self.keys.get(i));
        at.map_or("", String::as_str)
    }

    /// `ARGV[i]` (`""` past the end).
    pub(super) fn arg(&self, i: usize) -> &'a str {
        let at = i.checked_sub(1).and_then(|i| self.argv.get(i));
        at.map_or("", String::as_str)
    }

    /// `tonumber(ARGV[i])` as the count the scripts use (0 if none).
    pub(super) fn number(&self, i: usize) -> usize {
        usize::try_from(self.ms(i)).unwrap_or(0)
    }

    /// `tonumber(ARGV[i])` as a signed count of ms (0 if none; a fraction
    /// cut off).
    #[allow(clippy::cast_possible_truncation)]
    pub(super) fn ms(&self, i: usize) -> i64 {
        lua_number(self.arg(i)).map_or(0, |n| n as i64)
    }

    pub(super) fn now(&self) -> i64 {
        i64::try_from(self.now).unwrap_or(i64::MAX)
    }

    /// `KEYS[i]` as a command's argument: past the end it is nil, which no
    /// command takes.
    pub(super) fn key_at(&self, i: usize) -> Reply<&'a str> {
        let at = i.checked_sub(1).and_then(|i| self.keys.get(i));
        at.map(String::as_str)
            .ok_or_else(|| "ERR Lua redis lib command arguments must be strings or integers".into())
    }

    /// `ARGV[i]` as the `PX` time Redis reads it: an integer above 0.
    pub(super) fn px(&self, i: usize) -> Reply<u64> {
        expire_time(strict_integer(self.arg(i))?)
    }

    /// `redis.call("set",key,value,"PX",ARGV[px])`.
    pub(super) fn set_px(&mut self, key: &str, value: &str, px: usize) -> Reply<()> {
        let ms = self.px(px)?;
        self.k.set(self.now, key, value, Some(ms));
        Ok(())
    }

    /// `if redis.call("pttl",key)<ms then redis.call("pexpire",key,ms) end`.
    pub(super) fn live_at_least(&mut self, key: &str, ms: i64) {
        if self.k.pttl(self.now, key) < ms {
            self.k.pexpire(self.now, key, ms);
        }
    }

    /// `redis.pcall("get",key)` read as `type(v)=="string"`.
    pub(super) fn string_at(&self, key: &str) -> Option<String> {
        self.k.get(key).ok().flatten()
    }

    /// The token of an existing key, as the scripts answer "held": its
    /// string, or `other` when it holds another type.
    fn holder_or(&self, key: &str, other: i64) -> Value {
        self.string_at(key).map_or(Value::Int(other), |s| bulk(&s))
    }

    fn release(&mut self) -> Reply<Value> {
        let ours = self.k.get(self.key(1))?.as_deref() == Some(self.arg(1));
        Ok(Value::Int(i64::from(ours && self.k.del(self.key(1)))))
    }

    fn extend(&mut self) -> Reply<Value> {
        if self.k.get(self.key(1))?.as_deref() != Some(self.arg(1)) {
            return Ok(Value::Int(0));
        }
        let key = self.key(1);
        self.live_at_least(key, self.ms(2));
        Ok(Value::Int(1))
    }

    fn acquire_all(&mut self) -> Reply<Value> {
        for key in self.keys {
            if self.k.exists(key) {
                return Ok(self.holder_or(key, 0));
            }
        }
        for key in self.keys {
            self.set_px(key, self.arg(1), 2)?;
        }
        Ok(Value::Int(1))
    }

    fn release_all(&mut self) -> Reply<Value> {
        let mut ours = 0;
        for key in self.keys {
            if self.k.get(key)?.as_deref() == Some(self.arg(1)) {
                self.k.del(key);
                ours += 1;
            }
        }
        Ok(Value::Int(i64::from(ours == self.keys.len())))
    }

    fn extend_all(&mut self) -> Reply<Value> {
        for key in self.keys {
            if self.k.get(key)?.as_deref() != Some(self.arg(1)) {
                return Ok(Value::Int(0));
            }
        }
        for key in self.keys {
            self.live_at_least(key, self.ms(2));
        }
        Ok(Value::Int(1))
    }

    /// lib_fence's `stale`: of the fence keys `KEYS[first..first+n-1]`, the
    /// largest value not below `p` (-1: none is), or the error reply for a
    /// fence key that holds no fence value.
    /// (A proposal that is no number is an error at the first comparison,
    /// as Lua's with nil.)
    fn stale(&self, first: usize, n: usize, p: Option<f64>) -> Reply<Result<f64, Value>> {
        let mut worst = -1.0;
        for i in first..first + n {
            if let Some(raw) = self.k.get(self.key_at(i)?)? {
                let s = lua_number(&raw)
                    .filter(|s| s.fract() == 0.0 && *s >= 0.0 && *s < 9_007_199_254_740_992.0);
                let Some(s) = s else {
                    let key = self.key(i);
                    return Ok(Err(error(&format!(
                        "ERR redlock: {key} holds no fence value"
                    ))));
                };
                let p = p.ok_or("ERR user_script: attempt to compare nil with number")?;
                if s >= p && s > worst {
                    worst = s;
                }
            }
        }
        Ok(Ok(worst))
    }

    /// lib_fence's `refuse_stale`: the reply that refuses the proposed
    /// token `ARGV[p]`, if it must be refused.
    pub(super) fn refuse_stale(&self, first: usize, n: usize, p: usize) -> Reply<Option<Value>> {
        Ok(match self.stale(first, n, lua_number(self.arg(p)))? {
            Err(reply) => Some(reply),
            #[allow(clippy::cast_possible_truncation)]
            Ok(w) if w >= 0.0 => Some(Value::Array(vec![Value::Int(w as i64)])),
            Ok(_) => None,
        })
    }

    /// lib_fence's `fence`: the granted token `ARGV[p]` into the fence keys,
    /// living `ARGV[idle]` ms.
    pub(super) fn fence(&mut self, first: usize, n: usize, p: usize, idle: usize) -> Reply<()> {
        for i in first..first + n {
            let key = self.key_at(i)?;
            self.set_px(key, self.arg(p), idle)?;
        }
        Ok(())
    }

    /// lib_fence's `acquire_fenced(n)`.
    fn acquire_fenced(&mut self, n: usize) -> Reply<Value> {
        for i in 1..=n {
            let key = self.key_at(i)?;
            if self.k.exists(key) {
                return Ok(self.holder_or(key, -1));
            }
        }
        if let Some(no) = self.refuse_stale(n + 1, n, 4)? {
            return Ok(no);
        }
        for i in 1..=n {
            self.set_px(self.key_at(i)?, self.arg(1), 2)?;
        }
        self.fence(n + 1, n, 4, 5)?;
        Ok(Value::Int(1))
    }

    /// lib_slots's `slots_held(k)`.
    fn slots_held(&self, k: usize) -> Reply<Value> {
        let mut held = String::new();
        for i in 1..=k {
            // More slots than KEYS: KEYS[0] and below are nil.
            let at = (self.keys.len() + i).saturating_sub(k);
            held.push(if self.k.exists(self.key_at(at)?) {
                '1'
            } else {
                '0'
            });
        }
        Ok(bulk(&held))
    }

    fn slot_acquire(&mut self) -> Reply<Value> {
        let ttl = match self.px(2) {
            Ok(ttl) => Some(ttl),
            Err(failed) => return Ok(error(&failed)),
        };
        let r = match self.k.set_nx_get(self.now, self.key(1), self.arg(1), ttl) {
            Err(failed) if failed.contains("WRONGTYPE") => Value::Int(0),
            Err(failed) => return Ok(error(&failed)),
            Ok(None) => Value::Int(1),
            Ok(Some(holder)) => bulk(&holder),
        };
        Ok(Value::Array(vec![r, self.slots_held(self.number(3))?]))
    }

    fn slot_acquire_fenced(&mut self) -> Reply<Value> {
        let r = self.acquire_fenced(1)?;
        if matches!(r, Value::ServerError(_)) {
            return Ok(r);
        }
        Ok(Value::Array(vec![r, self.slots_held(self.number(6))?]))
    }

    fn read_acquire(&mut self) -> Reply<Value> {
        if self.k.exists(self.key(1)) || self.k.exists(self.key(3)) {
            return Ok(self.holder_or(self.key(1), 0));
        }
        let ttl = self.ms(2);
        let (readers, token) = (self.key(2), self.arg(1));
        self.k
            .zadd(readers, None, self.now().saturating_add(ttl), token)?;
        self.live_at_least(readers, ttl);
        Ok(Value::Int(1))
    }

    fn read_extend(&mut self) -> Reply<Value> {
        let (readers, token) = (self.key(1), self.arg(1));
        let until = self.k.zscore(readers, token)?;
        let Some(until) = until.filter(|u| *u > self.now()) else {
            return Ok(Value::Int(0));
        };
        let ttl = self.ms(2);
        if self.now().saturating_add(ttl) > until {
            self.k
                .zadd(readers, None, self.now().saturating_add(ttl), token)?;
        }
        self.live_at_least(readers, ttl);
        Ok(Value::Int(1))
    }

    fn read_release(&mut self) -> Reply<Value> {
        let (readers, token) = (self.key(1), self.arg(1));
        let until = self.k.zscore(readers, token)?;
        self.k.zrem(readers, token)?;
        self.k.zrem_up_to(readers, self.now())?;
        Ok(Value::Int(i64::from(until.is_some_and(|u| u > self.now()))))
    }

    fn write_acquire(&mut self) -> Reply<Value> {
        let fenced = self.keys.len() == 4;
        let no = if fenced { -1 } else { 0 };
        if self.k.exists(self.key(1)) {
            return Ok(self.holder_or(self.key(1), no));
        }
        let readers = self.key(2);
        self.k.zrem_up_to(readers, self.now())?;
        if self.k.zcard(readers)? > 0 {
            let (mark, token) = (self.key(3), self.arg(1));
            if self.arg(3) != "0" {
                let ms = self.px(3)?;
                if !self.k.set_nx(self.now, mark, token, Some(ms)) {
                    self.k
                        .pexpire(self.now, mark, i64::try_from(ms).unwrap_or(i64::MAX));
                }
            }
            return Ok(Value::Int(no));
        }
        if fenced && let Some(stale) = self.refuse_stale(4, 1, 4)? {
            return Ok(stale);
        }
        let (writer, mark) = (self.key(1), self.key(3));
        self.set_px(writer, self.arg(1), 2)?;
        self.k.del(mark);
        if fenced {
            self.fence(4, 1, 4, 5)?;
        }
        Ok(Value::Int(1))
    }

    fn inspect(&mut self) -> Reply<Value> {
        let n = self.number(1);
        let mut out = Vec::new();
        for i in 1..=n {
            let key = self.key(i);
            let value = self.string_at(key);
            let hash = match (&value, self.k.exists(key)) {
                (Some(v), _) => bulk(&sha1hex(v)),
                (None, true) => bulk("other"),
                (None, false) => Value::Nil,
            };
            out.push(hash);
            out.push(Value::Int(self.k.pttl(self.now, key)));
            out.push(value.as_deref().and_then(fence_of).map_or(Value::Nil, bulk));
        }
        if self.keys.len() > n {
            let readers = self.key(n + 1);
            let found = self
                .k
                .zrangebyscore(readers, Bound::After(self.now()), Bound::Above)?;
            for (member, until) in found {
                out.push(bulk(&sha1hex(&member)));
                out.push(Value::Int(until - self.now()));
                out.push(Value::Nil);
            }
        }
        Ok(Value::Array(out))
    }

    fn force_release(&mut self) -> Reply<Value> {
        let key = self.key(1);
        let theirs = self
            .string_at(key)
            .is_some_and(|v| sha1hex(&v).get(..16) == Some(self.arg(1)));
        Ok(Value::Int(i64::from(theirs && self.k.del(key))))
    }
}

/// Lua's `tonumber` of a string: a decimal number, or a hexadecimal one
/// written `0x…`.
pub(super) fn lua_number(s: &str) -> Option<f64> {
    let s = s.trim();
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        #[allow(clippy::cast_precision_loss)]
        return u64::from_str_radix(hex, 16).ok().map(|n| n as f64);
    }
    s.parse::<f64>().ok().filter(|n| n.is_finite())
}

/// An integer as Redis reads one: an optional `-`, then `0` or digits not
/// starting with `0`.
pub(super) fn strict_integer(s: &str) -> Reply<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let plain =
        digits == "0" || (digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0'));
    match s.parse() {
        Ok(n) if plain && !digits.is_empty() => Ok(n),
        _ => Err("ERR value is not an integer or out of range".to_owned()),
    }
}

/// A `PX` time as Redis takes it: above 0.
pub(super) fn expire_time(ms: i64) -> Reply<u64> {
    u64::try_from(ms)
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or_else(|| "ERR invalid expire time in 'set' command".to_owned())
}

/// `redis.sha1hex`.
fn sha1hex(s: &str) -> String {
    redis::Script::new(s).get_hash().to_owned()
}

/// A redlock-sync token's fencing token: `{40 hex}.{digits}`.
fn fence_of(v: &str) -> Option<&str> {
    let (hex, digits) = v.split_at_checked(40)?;
    let digits = digits.strip_prefix('.')?;
    let all_hex = hex.bytes().all(|b| b.is_ascii_hexdigit());
    let all_digits = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    (all_hex && all_digits).then_some(digits)
}
