//! The commands the crate sends outside scripts (`SET … NX GET PX`) and
//! those the scripts' tables run before and after a call, with Redis's
//! replies.

use redis::Value;

use super::data::{Bound, Keys, Reply, score};
use super::reply::{bulk, members, string};
use super::scripts::expire_time;

/// Runs the command `name` (upper case) with `args` at node time `now`;
/// wake-ups it publishes go to `wakes`.
pub(super) fn run(
    k: &mut Keys,
    wakes: &mut Vec<String>,
    now: u64,
    name: &str,
    args: &[String],
) -> Reply<Value> {
    let arg = |i: usize| args.get(i).map_or("", String::as_str);
    Ok(match name {
        "TIME" => Value::Array(vec![
            bulk(&(now / 1000).to_string()),
            bulk(&((now % 1000) * 1000).to_string()),
        ]),
        "PUBLISH" => {
            if let Some(client) = arg(0).strip_prefix("redlock-wake:") {
                wakes.push(format!("{client}:{}", arg(1)));
            }
            Value::Int(0)
        }
        _ if name.starts_with('Z') => sorted_sets(k, name, args)?,
        _ => keys(k, now, name, args)?,
    })
}

fn count(n: usize) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// Strings, lists and any key.
fn keys(k: &mut Keys, now: u64, name: &str, args: &[String]) -> Reply<Value> {
    let arg = |i: usize| args.get(i).map_or("", String::as_str);
    Ok(match name {
        "GET" => string(k.get(arg(0))?),
        "SET" => set(k, now, args)?,
        "DEL" => count(args.iter().filter(|key| k.del(key)).count()),
        "EXISTS" => count(args.iter().filter(|key| k.exists(key)).count()),
        "TYPE" => Value::SimpleString(k.kind(arg(0)).to_owned()),
        "PTTL" => Value::Int(k.pttl(now, arg(0))),
        "PEXPIRE" => Value::Int(i64::from(k.pexpire(now, arg(0), score(arg(1))?))),
        "RPUSH" => count(k.rpush(arg(0), args.get(1..).unwrap_or_default())?),
        _ => return Err(format!("ERR unknown command '{name}'")),
    })
}

/// `SET key value [NX] [GET] [PX ms]`.
fn set(k: &mut Keys, now: u64, args: &[String]) -> Reply<Value> {
    let (key, value) = match args {
        [key, value, ..] => (key.as_str(), value.as_str()),
        _ => return Err("ERR wrong number of arguments for 'set' command".to_owned()),
    };
    let (mut nx, mut get, mut px) = (false, false, None);
    let mut options = args.iter().skip(2);
    while let Some(option) = options.next() {
        match option.to_ascii_uppercase().as_str() {
            "NX" => nx = true,
            "GET" => get = true,
            "PX" => {
                let ms = score(options.next().map_or("", String::as_str))?;
                px = Some(expire_time(ms)?);
            }
            _ => return Err("ERR syntax error".to_owned()),
        }
    }
    Ok(match (nx, get) {
        (true, true) => string(k.set_nx_get(now, key, value, px)?),
        (true, false) if k.set_nx(now, key, value, px) => Value::Okay,
        (true, false) => Value::Nil,
        (false, true) => {
            let old = k.get(key)?;
            k.set(now, key, value, px);
            string(old)
        }
        (false, false) => {
            k.set(now, key, value, px);
            Value::Okay
        }
    })
}

/// The sorted set commands.
fn sorted_sets(k: &mut Keys, name: &str, args: &[String]) -> Reply<Value> {
    let arg = |i: usize| args.get(i).map_or("", String::as_str);
    let rest = args.get(1..).unwrap_or_default();
    Ok(match name {
        "ZADD" => {
            let flag = ["NX", "GT"]
                .into_iter()
                .find(|f| arg(1).eq_ignore_ascii_case(f));
            let pairs = &rest[usize::from(flag.is_some())..];
            let mut added = 0;
            for pair in pairs.chunks(2) {
                let member = pair.get(1).ok_or("ERR syntax error")?;
                added += usize::from(k.zadd(arg(0), flag, score(&pair[0])?, member)?);
            }
            count(added)
        }
        "ZREM" => {
            let mut removed = 0;
            for member in rest {
                removed += usize::from(k.zrem(arg(0), member)?);
            }
            count(removed)
        }
        "ZSCORE" => string(k.zscore(arg(0), arg(1))?.map(|s| s.to_string())),
        "ZCARD" => count(k.zcard(arg(0))?),
        "ZRANGE" => {
            let all = k.zrange(arg(0))?;
            let len = i64::try_from(all.len()).unwrap_or(i64::MAX);
            let at = |i: i64| if i < 0 { len + i } else { i };
            let (start, stop) = (at(score(arg(1))?).max(0), at(score(arg(2))?));
            let picked = all
                .into_iter()
                .zip(0..)
                .filter(|(_, i)| *i >= start && *i <= stop);
            members(picked.map(|(found, _)| found), arg(3))
        }
        "ZRANGEBYSCORE" => {
            let (min, max) = (Bound::parse(arg(1))?, Bound::parse(arg(2))?);
            members(k.zrangebyscore(arg(0), min, max)?, arg(3))
        }
        "ZREMRANGEBYSCORE" => match (arg(1), Bound::parse(arg(2))?) {
            ("-inf", Bound::At(at)) => count(k.zrem_up_to(arg(0), at)?),
            _ => return Err("ERR the node in Rust removes from -inf to a score only".to_owned()),
        },
        _ => return Err(format!("ERR unknown command '{name}'")),
    })
}
