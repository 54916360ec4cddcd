//! The election's scripts (`proclaim`, `leader`, `resign`,
//! `elect_extend`), line for line. The value key holds
//! `token term seq value`.

use redis::Value;

use super::data::Reply;
use super::reply::bulk;
use super::scripts::Call;

impl Call<'_> {
    /// The scripts of this file.
    pub(super) fn run_election(&mut self, script: &str) -> Reply<Value> {
        match script {
            "proclaim" => self.proclaim(),
            "leader" => self.leader(),
            "resign" => self.resign(),
            "elect_extend" => self.elect_extend(),
            _ => Err(format!("NOSCRIPT no script named {script}")),
        }
    }

    /// Whether the lock key holds the caller's token (`ARGV[1]`); the
    /// observers are woken where no lock key is held at all, as a
    /// proclamation or a resignation there wakes them.
    fn leads(&mut self, lock: &str, observers: &str) -> Reply<bool> {
        let h = self.k.get(lock)?;
        if h.is_none() {
            self.notify(observers)?;
        }
        Ok(h.as_deref() == Some(self.arg(1)))
    }

    fn proclaim(&mut self) -> Reply<Value> {
        let (lock, value, observers) = (self.key(1), self.key(2), self.key(3));
        if !self.leads(lock, observers)? {
            return Ok(Value::Int(0));
        }
        if let Some(cur) = self.k.get(value)?
            && let Some((token, _, seq)) = proclamation(&cur)
            && token == self.arg(1)
            && seq >= self.arg(3).parse::<f64>().unwrap_or(f64::NAN)
        {
            return Ok(Value::Int(1));
        }
        let text = format!(
            "{} {} {} {}",
            self.arg(1),
            self.arg(2),
            self.arg(3),
            self.arg(4)
        );
        self.k.set(self.now, value, &text, None);
        let ttl = self.k.pttl(self.now, lock).max(1);
        self.k.pexpire(self.now, value, ttl);
        self.notify(observers)?;
        Ok(Value::Int(1))
    }

    fn leader(&mut self) -> Reply<Value> {
        if !self.argv.is_empty() {
            let observers = self.key(3);
            let (member, ms) = (self.arg(1), self.ms(2));
            self.k.zrem_up_to(observers, self.now())?;
            self.k
                .zadd(observers, None, self.now().saturating_add(ms), member)?;
            self.k.pexpire(self.now, observers, ms);
        }
        let Some(t) = self.k.get(self.key(1))? else {
            return Ok(Value::Int(0));
        };
        let Some(cur) = self.k.get(self.key(2))? else {
            return Ok(Value::Int(1));
        };
        match first_word(&cur) {
            Some((token, rest)) if token == t => Ok(bulk(rest)),
            _ => Ok(Value::Int(1)),
        }
    }

    fn resign(&mut self) -> Reply<Value> {
        let (lock, value, observers) = (self.key(1), self.key(2), self.key(3));
        if !self.leads(lock, observers)? {
            return Ok(Value::Int(0));
        }
        let cur = self.k.get(value)?;
        if cur
            .as_deref()
            .and_then(first_word)
            .is_some_and(|(t, _)| t == self.arg(1))
        {
            self.k.del(value);
            self.notify(observers)?;
        }
        Ok(Value::Int(1))
    }

    fn elect_extend(&mut self) -> Reply<Value> {
        let (lock, value) = (self.key(1), self.key(2));
        if self.k.get(lock)?.as_deref() != Some(self.arg(1)) {
            return Ok(Value::Int(0));
        }
        self.live_at_least(lock, self.ms(2));
        let ours = format!("{} ", self.arg(1));
        if self.string_at(value).is_some_and(|v| v.starts_with(&ours)) {
            let t = self.k.pttl(self.now, lock);
            self.live_at_least(value, t);
        }
        Ok(Value::Int(1))
    }
}

/// `string.match(v,"^(%S+) (.*)$")`: the first word and the rest.
fn first_word(v: &str) -> Option<(&str, &str)> {
    let end = v.find(char::is_whitespace)?;
    let (word, rest) = v.split_at(end);
    (!word.is_empty() && rest.starts_with(' ')).then(|| (word, &rest[1..]))
}

/// `string.match(cur,"^(%S+) (%d+) (%d+) ")`: token, term and seq.
fn proclamation(cur: &str) -> Option<(&str, f64, f64)> {
    let (token, rest) = first_word(cur)?;
    let mut parts = rest.splitn(3, ' ');
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let term = parts.next().filter(|s| digits(s))?;
    let seq = parts.next().filter(|s| digits(s))?;
    parts.next()?;
    Some((token, term.parse().ok()?, seq.parse().ok()?))
}
