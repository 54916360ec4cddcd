//! `lib_queue.lua` (the gate node's queue of waiters, its turn rule, the
//! wake-ups) and the scripts that use it, line for line.

use redis::Value;

use super::data::{Bound, Reply};
use super::reply::bulk;
use super::scripts::Call;

/// lib_queue's `ALIVE`: how long a place counts without a refresh, ms (a
/// node's own may be scaled: [`Node::with_alive`](super::Node::with_alive)).
pub(crate) const ALIVE: i64 = 2000;

/// A script of this file, run with its queue.
type Run<'a> = for<'c, 'q> fn(&'c mut Call<'a>, &Queue<'q>) -> Reply<Value>;

/// lib_queue's globals: the queue keys, the caller's member and the grace.
struct Queue<'a> {
    q: &'a str,
    a: &'a str,
    me: &'a str,
    grace: i64,
}

impl<'a> Call<'a> {
    /// The scripts of this file and `elect.rs`.
    pub(super) fn run_queued(&mut self, script: &str) -> Reply<Value> {
        // Each script's ARGV places of the member and the grace (0: none).
        let (me, grace, run): (usize, usize, Run<'a>) = match script {
            "gate_acquire" => (5, 4, Self::gate_acquire),
            "gate_acquire_fenced" => (8, 7, Self::gate_acquire_fenced),
            "gate_release" => (2, 0, Self::gate_release),
            "leave" => (0, 0, Self::leave),
            "gate_read_release" => (2, 0, Self::gate_read_release),
            "gate_rw_acquire" => (8, 7, Self::gate_rw_acquire),
            _ => return self.run_election(script),
        };
        let n = self.keys.len();
        let q = Queue {
            q: self.key(n.saturating_sub(1)),
            a: self.key(n),
            me: if me == 0 { "" } else { self.arg(me) },
            grace: if grace == 0 { 0 } else { self.ms(grace) },
        };
        run(self, &q)
    }

    /// `wake(m)`: publishes member `m`'s ticket on its client's channel.
    pub(super) fn wake(&mut self, m: &str) {
        if let Some((client, ticket)) = m.rsplit_once(':')
            && !ticket.is_empty()
            && ticket.bytes().all(|b| b.is_ascii_digit())
        {
            self.wakes.push(format!("{client}:{ticket}"));
        }
    }

    /// `waits(m)`: whether member `m` still counts as alive.
    fn waits(&self, q: &Queue, m: &str) -> Reply<bool> {
        Ok(self.k.zscore(q.a, m)?.is_some_and(|s| s > self.now()))
    }

    /// `head()`: drops the members past their alive time; the first left.
    fn head(&mut self, q: &Queue) -> Reply<Option<String>> {
        let dead = self
            .k
            .zrangebyscore(q.a, Bound::Below, Bound::At(self.now()))?;
        for (member, _) in &dead {
            self.k.zrem(q.q, member)?;
        }
        for (member, _) in &dead {
            self.k.zrem(q.a, member)?;
        }
        self.k.zfirst(q.q)
    }

    /// `place(m,score)`: queues `m` (keeping its place; a newcomer after
    /// the last member), refreshes its alive time; both keys live at least
    /// `ALIVE`.
    fn place(&mut self, q: &Queue, m: &str, score: i64) -> Reply<()> {
        if self.k.zscore(q.q, m)?.is_none() {
            let last = self.k.zrange(q.q)?.last().map(|(_, s)| *s);
            let score = match last {
                Some(last) if score > 0 && last >= score => last + 1,
                _ => score,
            };
            self.k.zadd(q.q, None, score, m)?;
        }
        self.k
            .zadd(q.a, None, self.now().saturating_add(self.alive), m)?;
        self.live_at_least(q.q, self.alive);
        self.live_at_least(q.a, self.alive);
        Ok(())
    }

    /// `grant()`: notes a grant for the grace.
    fn grant(&mut self, q: &Queue) -> Reply<()> {
        self.k.zadd(
            q.a,
            Some("GT"),
            self.now().saturating_add(q.grace),
            "granted",
        )?;
        self.live_at_least(q.a, q.grace);
        Ok(())
    }

    /// `granting()`: whether a grant is still the queue's.
    fn granting(&self, q: &Queue) -> Reply<bool> {
        self.waits(q, "granted")
    }

    /// `turn(held)`: 1 the caller may set the keys, 0 held and nobody
    /// before it, 2 others queued first.
    fn turn(&mut self, q: &Queue, held: bool) -> Reply<i64> {
        let h = self.head(q)?;
        if !held && h.as_deref().is_none_or(|h| h == q.me) {
            if h.is_some() {
                self.k.zrem(q.q, q.me)?;
                self.k.zrem(q.a, q.me)?;
            }
            self.grant(q)?;
            return Ok(1);
        }
        if !q.me.is_empty() {
            self.place(q, q.me, self.now())?;
        }
        if held {
            if h.as_deref().is_some_and(|h| h != q.me) || self.granting(q)? {
                return Ok(2);
            }
            return Ok(0);
        }
        if let Some(h) = h.filter(|h| *h != q.me) {
            self.wake(&h);
        }
        Ok(2)
    }

    /// `pass_on(first,k)`: wakes the head if any of those keys is free.
    fn pass_on(&mut self, q: &Queue, first: usize, k: usize) -> Reply<()> {
        for i in first..first + k {
            if !self.k.exists(self.key(i)) {
                if let Some(h) = self.head(q)? {
                    self.wake(&h);
                }
                return Ok(());
            }
        }
        Ok(())
    }

    /// `notify(obs)`: wakes every live observer of an election.
    pub(super) fn notify(&mut self, obs: &str) -> Reply<()> {
        self.k.zrem_up_to(obs, self.now())?;
        for (member, _) in self.k.zrange(obs)? {
            self.wake(&member);
        }
        Ok(())
    }

    /// Whether any of `KEYS[1..n]` exists.
    fn any_held(&self, n: usize) -> Reply<bool> {
        for i in 1..=n {
            if self.k.exists(self.key_at(i)?) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Sets `KEYS[1..n]` to the token for `ARGV[2]` ms.
    fn set_all(&mut self, n: usize) -> Reply<()> {
        for i in 1..=n {
            self.set_px(self.key_at(i)?, self.arg(1), 2)?;
        }
        Ok(())
    }

    fn gate_acquire(&mut self, q: &Queue) -> Reply<Value> {
        let k = self.number(3);
        let n = self.keys.len().saturating_sub(2 + k);
        let r = self.turn(q, self.any_held(n)?)?;
        if r != 1 {
            return Ok(Value::Int(r));
        }
        self.set_all(n)?;
        self.pass_on(q, n + 1, k)?;
        Ok(Value::Int(1))
    }

    fn gate_acquire_fenced(&mut self, q: &Queue) -> Reply<Value> {
        let n = self.number(3);
        let held = self.any_held(n)?;
        let h = self.head(q)?;
        if !held
            && h.as_deref().is_none_or(|h| h == q.me)
            && let Some(no) = self.refuse_stale(n + 1, n, 4)?
        {
            return Ok(no);
        }
        match self.turn(q, held)? {
            0 => return Ok(Value::Int(-1)),
            2 => return Ok(Value::Int(-2)),
            _ => {}
        }
        self.set_all(n)?;
        self.fence(n + 1, n, 4, 5)?;
        self.pass_on(q, 2 * n + 1, self.number(6))?;
        Ok(Value::Int(1))
    }

    fn gate_release(&mut self, q: &Queue) -> Reply<Value> {
        let n = self.keys.len().saturating_sub(2);
        let mut ours = 0;
        for i in 1..=n {
            let key = self.key(i);
            if self.k.get(key)?.as_deref() == Some(self.arg(1)) {
                self.k.del(key);
                ours += 1;
            }
        }
        let mut woke = 0;
        if !q.me.is_empty() || self.k.exists(q.q) {
            if ours > 0 && !q.me.is_empty() {
                self.place(q, q.me, 0)?;
            }
            if (self.arg(3) == "1" || !self.k.exists(self.key(1)))
                && let Some(h) = self.head(q)?.filter(|h| *h != q.me)
            {
                self.wake(&h);
                woke = 1;
            }
        }
        Ok(Value::Int(if ours < n { 0 } else { 1 + woke }))
    }

    fn leave(&mut self, q: &Queue) -> Reply<Value> {
        let member = self.arg(1);
        self.k.zrem(q.q, member)?;
        self.k.zrem(q.a, member)?;
        self.pass_on(q, 1, self.keys.len().saturating_sub(2))?;
        Ok(Value::Int(1))
    }

    fn gate_read_release(&mut self, q: &Queue) -> Reply<Value> {
        let (readers, token) = (self.key(1), self.arg(1));
        let until = self.k.zscore(readers, token)?;
        self.k.zrem(readers, token)?;
        self.k.zrem_up_to(readers, self.now())?;
        if until.is_some() && !q.me.is_empty() {
            self.place(q, q.me, 0)?;
        }
        let mut woke = 0;
        let emptied = until.is_some() && self.k.zcard(readers)? == 0 && !self.k.exists(self.key(2));
        if self.arg(3) == "1" || emptied {
            let mut h = self.k.get(self.key(3))?;
            if let Some(marked) = h.clone()
                && !self.waits(q, &marked)?
            {
                h = None;
            }
            if h.is_none() {
                h = self.head(q)?;
            }
            if let Some(h) = h.filter(|h| *h != q.me) {
                self.wake(&h);
                woke = 1;
            }
        }
        Ok(Value::Int(match until {
            Some(until) if until > self.now() => 1 + woke,
            _ => 0,
        }))
    }

    fn gate_rw_acquire(&mut self, q: &Queue) -> Reply<Value> {
        let fenced = self.keys.len() == 6;
        let reader = self.arg(6) == "r";
        let Seen {
            writer,
            readers,
            marked,
            held,
        } = self.look(q, reader)?;
        let h = self.head(q)?;
        let mine = !reader && !held && !q.me.is_empty() && marked.as_deref() == Some(q.me);
        if fenced
            && !reader
            && !held
            && (h.as_deref().is_none_or(|h| h == q.me) || mine)
            && let Some(no) = self.refuse_stale(4, 1, 4)?
        {
            return Ok(no);
        }
        if reader
            && held
            && writer.is_none()
            && readers == 0
            && let Some(m) = &marked
        {
            self.wake(m);
        }
        let r = if mine {
            self.k.zrem(q.q, q.me)?;
            self.k.zrem(q.a, q.me)?;
            self.grant(q)?;
            1
        } else {
            let r = self.turn(q, held)?;
            let marked_mine =
                !reader && writer.is_none() && !q.me.is_empty() && marked.as_deref() == Some(q.me);
            if r == 2 && marked_mine { 0 } else { r }
        };
        match r {
            2 => Ok(Value::Int(if fenced { -2 } else { 2 })),
            0 => Ok(match writer.filter(|w| !w.is_empty()) {
                Some(w) => bulk(&w),
                None => Value::Int(if fenced { -1 } else { 0 }),
            }),
            _ => self.enter(q, reader, fenced),
        }
    }

    /// gate_rw_acquire's first part: what holds, and the waiting writer's
    /// mark (a dead waiter's dropped; this writer's set where it must wait).
    fn look(&mut self, q: &Queue, reader: bool) -> Reply<Seen> {
        let (writer_key, readers_key, mark) = (self.key(1), self.key(2), self.key(3));
        self.k.zrem_up_to(readers_key, self.now())?;
        let writer = match self.k.exists(writer_key) {
            true => Some(self.string_at(writer_key).unwrap_or_default()),
            false => None,
        };
        let readers = self.k.zcard(readers_key)?;
        let mut marked = self.k.get(mark)?;
        if let Some(m) = marked.clone()
            && m != q.me
            && ends_with_ticket(&m)
            && !self.waits(q, &m)?
        {
            self.k.del(mark);
            marked = None;
        }
        let held = writer.is_some() || (reader && marked.is_some()) || (!reader && readers > 0);
        let other_waits = match marked.clone() {
            Some(m) if m != q.me => self.waits(q, &m)?,
            _ => false,
        };
        if !reader
            && writer.is_none()
            && (readers > 0 || marked.is_some())
            && self.arg(3) != "0"
            && !other_waits
        {
            let by = if q.me.is_empty() { self.arg(1) } else { q.me };
            marked = Some(by.to_owned());
            self.set_px(mark, by, 3)?;
        }
        Ok(Seen {
            writer,
            readers,
            marked,
            held,
        })
    }

    /// gate_rw_acquire's last part, once the caller may go in: a reader
    /// joins the set (and the next head is woken), a writer takes the key.
    fn enter(&mut self, q: &Queue, reader: bool, fenced: bool) -> Reply<Value> {
        let (writer_key, readers_key, mark) = (self.key(1), self.key(2), self.key(3));
        if reader {
            let ttl = self.ms(2);
            self.k.zadd(
                readers_key,
                None,
                self.now().saturating_add(ttl),
                self.arg(1),
            )?;
            self.live_at_least(readers_key, ttl);
            if let Some(next) = self.head(q)? {
                self.wake(&next);
            }
            return Ok(Value::Int(1));
        }
        self.set_px(writer_key, self.arg(1), 2)?;
        self.k.del(mark);
        if fenced {
            self.fence(4, 1, 4, 5)?;
        }
        Ok(Value::Int(1))
    }
}

/// What gate_rw_acquire finds: the writer's token (`""`: no string), the
/// live readers, the waiting writer's mark, and whether the caller is held
/// off.
struct Seen {
    writer: Option<String>,
    readers: usize,
    marked: Option<String>,
    held: bool,
}

/// `string.match(m,":%d+$")`: a member's `:{ticket}` ending.
fn ends_with_ticket(m: &str) -> bool {
    m.rsplit_once(':')
        .is_some_and(|(_, t)| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
}
