//! An operator's tool: see who holds a lock, free one whose holder is
//! gone, and check the nodes.
//!
//! ```text
//! cargo run --example ctl -- --nodes redis://h1,redis://h2,redis://h3 inspect reports:nightly
//! cargo run --example ctl -- --nodes redis://h1,redis://h2,redis://h3 release reports:nightly
//! cargo run --example ctl -- --nodes redis://h1,redis://h2,redis://h3 health
//! ```
//!
//! Run `--help` for the commands and exit codes.

use std::process::ExitCode;
use std::time::Duration;

use redlock_sync::{Error, Holding, Redlock};

const HELP: &str = "\
ctl: see and free Redlock locks, and check the nodes.

usage: ctl [--nodes URL,...] COMMAND

commands:
  inspect NAME               who holds the lock NAME on a majority of the nodes
  inspect --permits K NAME   the permits in use of the semaphore NAME of K permits
  inspect --rw NAME          the writer or readers of the reader-writer lock NAME
  release NAME               release the lock NAME from the holder a majority of the
                             nodes agree on, whoever it is. Its holder may still be
                             working until its next renewal fails; fencing tokens
                             keep protecting the storage.
  health                     every node: up or down, whether it counts, and why not

options:
  --nodes URL,...   the Redis masters the locks live on, comma-separated, as the
                    programs that lock list them; default $REDLOCK_NODES
  -h, --help        this help

exit status:
  0    inspect: held; release: a holder was released; health: a majority counts
  1    inspect: free; release: nobody held it; health: too few nodes count
  64   bad usage
  69   the nodes cannot tell (too few answered), or a node URL is unusable
";

/// What was asked.
enum Command {
    Lock(String),
    Semaphore(String, u32),
    Rw(String),
    Release(String),
    Health,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{HELP}");
        return ExitCode::SUCCESS;
    }
    let (nodes, command) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(why) => {
            eprintln!("ctl: {why}\n\n{HELP}");
            return ExitCode::from(64);
        }
    };
    let redlock = match Redlock::new(nodes.split(',').map(str::trim)) {
        Ok(redlock) => redlock,
        Err(err) => return unavailable(&err),
    };
    let code = match run(&redlock, command) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(err @ Error::Config { .. }) => {
            eprintln!("ctl: {err}");
            ExitCode::from(64)
        }
        Err(err) => unavailable(&err),
    };
    let _ = redlock.shutdown(Duration::from_secs(2));
    code
}

fn unavailable(err: &Error) -> ExitCode {
    eprintln!("ctl: {err}");
    ExitCode::from(69)
}

/// The node list and the command, or what is wrong with them.
fn parse(args: &[String]) -> Result<(String, Command), String> {
    let mut nodes = std::env::var("REDLOCK_NODES").ok();
    let mut rest = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--nodes" => nodes = Some(args.next().ok_or("--nodes needs a URL list")?.clone()),
            _ => rest.push(arg.as_str()),
        }
    }
    let nodes = nodes.ok_or("no nodes: give --nodes URL,... or set REDLOCK_NODES")?;
    let command = match rest[..] {
        ["inspect", "--permits", k, name] => {
            let permits = k
                .parse()
                .map_err(|_| format!("--permits takes a number, not {k:?}"))?;
            Command::Semaphore(name.to_owned(), permits)
        }
        ["inspect", "--rw", name] => Command::Rw(name.to_owned()),
        ["inspect", name] => Command::Lock(name.to_owned()),
        ["release", name] => Command::Release(name.to_owned()),
        ["health"] => Command::Health,
        [] => return Err("no command given".into()),
        _ => return Err(format!("cannot read the command {:?}", rest.join(" "))),
    };
    Ok((nodes, command))
}

/// Runs the command; `true` for exit status 0 (held, released, healthy).
fn run(redlock: &Redlock, command: Command) -> Result<bool, Error> {
    match command {
        Command::Lock(name) => {
            let holding = redlock.inspect(&name)?;
            match &holding {
                Some(holding) => println!("{name}: held, {}", describe(holding)),
                None => println!("{name}: free (no holder on a majority of the nodes)"),
            }
            Ok(holding.is_some())
        }
        Command::Semaphore(name, permits) => {
            let in_use = redlock.semaphore(&name, permits).inspect()?;
            println!("{name}: {} of {permits} permits in use", in_use.len());
            for holding in &in_use {
                println!("  {}", describe(holding));
            }
            Ok(!in_use.is_empty())
        }
        Command::Rw(name) => {
            let holders = redlock.rw_lock(&name).inspect()?;
            match (holders.writer(), holders.readers()) {
                (Some(writer), _) => println!("{name}: a writer, {}", describe(writer)),
                (None, []) => println!("{name}: free (no holder on a majority of the nodes)"),
                (None, readers) => println!("{name}: {} reader(s)", readers.len()),
            }
            for reader in holders.readers() {
                println!("  reader, {}", describe(reader));
            }
            Ok(!holders.is_free())
        }
        Command::Release(name) => {
            let was_held = redlock.force_release(&name)?;
            if was_held {
                println!(
                    "{name}: released; its holder may still be working until its next renewal \
                     fails"
                );
            } else {
                println!("{name}: nobody held it on a majority; nothing was deleted");
            }
            Ok(was_held)
        }
        Command::Health => {
            let nodes = redlock.verify();
            for node in &nodes {
                println!("{node}");
            }
            let counting = nodes.iter().filter(|n| n.is_admitted()).count();
            println!(
                "{counting} of {} nodes count; a lock needs {}",
                nodes.len(),
                redlock.quorum()
            );
            Ok(counting >= redlock.quorum())
        }
    }
}

/// What is left of a hold, and its fencing token.
fn describe(holding: &Holding) -> String {
    let left = match holding.remaining() {
        Duration::MAX => "no expiry".to_owned(),
        left => format!("at least {} ms left", left.as_millis()),
    };
    match holding.fencing_token() {
        Some(token) => format!("{left}, fencing token {token}"),
        None => format!("{left}, no fencing token"),
    }
}
