//! The keyspace: strings, sorted sets and lists, each key with its expiry
//! in node ms, and the commands the scripts and their tables use, with
//! Redis's answers (an empty set is no key; a command on a key of another
//! type is a `WRONGTYPE` error).

use std::collections::BTreeMap;

/// A command's failure, as Redis words it.
pub(super) type Failed = String;

/// What a command answers, or its failure.
pub(super) type Reply<T> = Result<T, Failed>;

const WRONG_TYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A key's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Data {
    Str(String),
    /// Member to score.
    ZSet(BTreeMap<String, i64>),
    List(Vec<String>),
}

/// A key: its value and when it expires (node ms; `None`: never).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Entry {
    pub(super) data: Data,
    pub(super) expires: Option<u64>,
}

/// A score bound of `ZRANGEBYSCORE`: `-inf`, `+inf`, `N` or `(N`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Bound {
    Below,
    Above,
    At(i64),
    After(i64),
}

impl Bound {
    pub(super) fn parse(word: &str) -> Reply<Bound> {
        Ok(match word {
            "-inf" => Bound::Below,
            "+inf" | "inf" => Bound::Above,
            _ => match word.strip_prefix('(') {
                Some(n) => Bound::After(score(n)?),
                None => Bound::At(score(word)?),
            },
        })
    }

    fn min_admits(self, s: i64) -> bool {
        match self {
            Bound::Below => true,
            Bound::Above => false,
            Bound::At(n) => s >= n,
            Bound::After(n) => s > n,
        }
    }

    fn max_admits(self, s: i64) -> bool {
        match self {
            Bound::Below => false,
            Bound::Above => true,
            Bound::At(n) => s <= n,
            Bound::After(n) => s < n,
        }
    }
}

/// A score or a count as Redis reads it.
pub(super) fn score(word: &str) -> Reply<i64> {
    word.parse()
        .map_err(|_| "ERR value is not an integer or out of range".to_owned())
}

/// A node's keys at one moment, `now` (node ms): a key whose time passed
/// is gone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Keys {
    pub(super) map: BTreeMap<String, Entry>,
}

impl Keys {
    /// Drops every key whose time has passed at `now`: as Redis has it,
    /// a key is still there in the very ms it expires at (`PTTL` 0).
    pub(super) fn expire(&mut self, now: u64) {
        self.map.retain(|_, e| e.expires.is_none_or(|at| at >= now));
    }

    pub(super) fn exists(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    pub(super) fn kind(&self, key: &str) -> &'static str {
        match self.map.get(key).map(|e| &e.data) {
            None => "none",
            Some(Data::Str(_)) => "string",
            Some(Data::ZSet(_)) => "zset",
            Some(Data::List(_)) => "list",
        }
    }

    pub(super) fn get(&self, key: &str) -> Reply<Option<String>> {
        match self.map.get(key).map(|e| &e.data) {
            None => Ok(None),
            Some(Data::Str(s)) => Ok(Some(s.clone())),
            Some(_) => Err(WRONG_TYPE.to_owned()),
        }
    }

    /// `SET key value [PX ms]`: replaces whatever the key held.
    pub(super) fn set(&mut self, now: u64, key: &str, value: &str, px: Option<u64>) {
        let entry = Entry {
            data: Data::Str(value.to_owned()),
            expires: px.map(|ms| now + ms),
        };
        self.map.insert(key.to_owned(), entry);
    }

    /// `SET key value NX GET PX ms`: the value held (the key then
    /// untouched), or `None` once set.
    pub(super) fn set_nx_get(
        &mut self,
        now: u64,
        key: &str,
        value: &str,
        px: Option<u64>,
    ) -> Reply<Option<String>> {
        if let Some(held) = self.get(key)? {
            return Ok(Some(held));
        }
        self.set(now, key, value, px);
        Ok(None)
    }

    /// `SET key value NX PX ms` (no `GET`): whether it set the key (any
    /// key there, of any type, stops it).
    pub(super) fn set_nx(&mut self, now: u64, key: &str, value: &str, px: Option<u64>) -> bool {
        if self.exists(key) {
            return false;
        }
        self.set(now, key, value, px);
        true
    }

    pub(super) fn del(&mut self, key: &str) -> bool {
        self.map.remove(key).is_some()
    }

    /// `PTTL`: -2 no key, -1 no expiry.
    pub(super) fn pttl(&self, now: u64, key: &str) -> i64 {
        match self.map.get(key) {
            None => -2,
            Some(Entry { expires: None, .. }) => -1,
            Some(Entry {
                expires: Some(at), ..
            }) => i64::try_from(at - now).unwrap_or(i64::MAX),
        }
    }

    /// `PEXPIRE`: whether the key exists (a time not after now deletes it).
    pub(super) fn pexpire(&mut self, now: u64, key: &str, ms: i64) -> bool {
        let Some(entry) = self.map.get_mut(key) else {
            return false;
        };
        match u64::try_from(ms) {
            Ok(ms) if ms > 0 => entry.expires = Some(now + ms),
            _ => {
                self.map.remove(key);
            }
        }
        true
    }

    fn zset(&self, key: &str) -> Reply<Option<&BTreeMap<String, i64>>> {
        match self.map.get(key).map(|e| &e.data) {
            None => Ok(None),
            Some(Data::ZSet(set)) => Ok(Some(set)),
            Some(_) => Err(WRONG_TYPE.to_owned()),
        }
    }

    /// The sorted set at `key` to change, made if missing.
    fn zset_mut(&mut self, key: &str) -> Reply<&mut BTreeMap<String, i64>> {
        let entry = self.map.entry(key.to_owned()).or_insert(Entry {
            data: Data::ZSet(BTreeMap::new()),
            expires: None,
        });
        match &mut entry.data {
            Data::ZSet(set) => Ok(set),
            _ => Err(WRONG_TYPE.to_owned()),
        }
    }

    /// An emptied set is no key.
    fn drop_if_empty(&mut self, key: &str) {
        if matches!(self.map.get(key), Some(Entry { data: Data::ZSet(s), .. }) if s.is_empty()) {
            self.map.remove(key);
        }
    }

    /// `ZADD key [NX|GT] score member`: whether the member is new.
    pub(super) fn zadd(
        &mut self,
        key: &str,
        flag: Option<&str>,
        s: i64,
        member: &str,
    ) -> Reply<bool> {
        let set = self.zset_mut(key)?;
        let old = set.get(member).copied();
        let keep = match (flag, old) {
            (_, None) => false,
            (Some("NX"), Some(_)) => true,
            (Some("GT"), Some(old)) => s <= old,
            _ => false,
        };
        if !keep {
            set.insert(member.to_owned(), s);
        }
        Ok(old.is_none())
    }

    pub(super) fn zrem(&mut self, key: &str, member: &str) -> Reply<bool> {
        if self.zset(key)?.is_none() {
            return Ok(false);
        }
        let removed = self.zset_mut(key)?.remove(member).is_some();
        self.drop_if_empty(key);
        Ok(removed)
    }

    pub(super) fn zscore(&self, key: &str, member: &str) -> Reply<Option<i64>> {
        Ok(self.zset(key)?.and_then(|set| set.get(member).copied()))
    }

    pub(super) fn zcard(&self, key: &str) -> Reply<usize> {
        Ok(self.zset(key)?.map_or(0, BTreeMap::len))
    }

    /// The members by score (then by name), with their scores.
    pub(super) fn zrange(&self, key: &str) -> Reply<Vec<(String, i64)>> {
        let mut all: Vec<(String, i64)> = self
            .zset(key)?
            .map(|set| set.iter().map(|(m, s)| (m.clone(), *s)).collect())
            .unwrap_or_default();
        all.sort_by(|(m1, s1), (m2, s2)| s1.cmp(s2).then_with(|| m1.cmp(m2)));
        Ok(all)
    }

    /// The first member by score, if any.
    pub(super) fn zfirst(&self, key: &str) -> Reply<Option<String>> {
        Ok(self.zrange(key)?.into_iter().next().map(|(m, _)| m))
    }

    pub(super) fn zrangebyscore(
        &self,
        key: &str,
        min: Bound,
        max: Bound,
    ) -> Reply<Vec<(String, i64)>> {
        let mut all = self.zrange(key)?;
        all.retain(|(_, s)| min.min_admits(*s) && max.max_admits(*s));
        Ok(all)
    }

    /// `ZREMRANGEBYSCORE key -inf at`: drops the members scored up to `at`.
    pub(super) fn zrem_up_to(&mut self, key: &str, at: i64) -> Reply<usize> {
        let gone = self.zrangebyscore(key, Bound::Below, Bound::At(at))?;
        for (member, _) in &gone {
            self.zrem(key, member)?;
        }
        Ok(gone.len())
    }

    pub(super) fn rpush(&mut self, key: &str, values: &[String]) -> Reply<usize> {
        let entry = self.map.entry(key.to_owned()).or_insert(Entry {
            data: Data::List(Vec::new()),
            expires: None,
        });
        match &mut entry.data {
            Data::List(list) => {
                list.extend(values.iter().cloned());
                Ok(list.len())
            }
            _ => Err(WRONG_TYPE.to_owned()),
        }
    }
}
