//! Hops per operation: the context switches and the syscalls of this
//! process (all its threads, those that ended too, and any idle threads
//! of the contenders built so far) over one phase of the bench. Context
//! switches come from `getrusage(RUSAGE_SELF)`; syscalls from `perf stat -e
//! raw_syscalls:sys_enter` attached to the process, started disabled and
//! enabled over its control FIFO for the phase alone (no syscall figure
//! where `perf` is missing or not allowed).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What a phase cost, in all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hops {
    pub(crate) voluntary: i64,
    pub(crate) involuntary: i64,
    pub(crate) syscalls: Option<u64>,
}

impl Hops {
    /// Per operation, as two table cells: "voluntary + involuntary
    /// switches | syscalls".
    pub(crate) fn per(&self, operations: usize) -> String {
        let n = operations.max(1) as f64;
        let syscalls = self
            .syscalls
            .map_or("—".to_owned(), |s| format!("{:.1}", s as f64 / n));
        format!(
            "{:.1} + {:.1} | {syscalls}",
            self.voluntary as f64 / n,
            self.involuntary as f64 / n
        )
    }
}

/// A phase being counted.
pub(crate) struct Counting {
    switches: (i64, i64),
    perf: Option<Perf>,
}

/// How long `perf` may take to start, to answer a command, or to exit.
const PERF_DEADLINE: Duration = Duration::from_secs(10);

/// `perf` failed once: not tried again.
static NO_PERF: AtomicBool = AtomicBool::new(false);

impl Counting {
    /// Starts counting (and `perf`, if it can be had).
    pub(crate) fn start() -> Counting {
        let perf = if NO_PERF.load(Ordering::Relaxed) {
            None
        } else {
            let perf = Perf::start();
            if perf.is_none() {
                NO_PERF.store(true, Ordering::Relaxed);
                eprintln!("hops: no `perf stat` (missing or not allowed): no syscall figures");
            }
            perf
        };
        Counting {
            switches: switches(),
            perf,
        }
    }

    /// Stops counting: what the phase cost.
    pub(crate) fn stop(self) -> Hops {
        let after = switches();
        let syscalls = self.perf.and_then(Perf::stop);
        Hops {
            voluntary: after.0 - self.switches.0,
            involuntary: after.1 - self.switches.1,
            syscalls,
        }
    }
}

/// A `perf stat` attached to this process. Dropped, it is killed and
/// waited for, and its FIFOs' directory removed.
struct Perf {
    #[allow(dead_code)] // Held for its Drop.
    dir: Scratch,
    child: Child,
    ctl: Option<File>,
    ack: Option<File>,
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Perf {
    fn start() -> Option<Perf> {
        let path = std::env::temp_dir().join(format!("bench-perf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).ok()?;
        let dir = Scratch(path);
        let (ctl, ack) = (dir.0.join("ctl"), dir.0.join("ack"));
        mkfifo(&ctl)?;
        mkfifo(&ack)?;
        let child = Command::new("perf")
            .args(["stat", "-x,", "-D", "-1", "-e", "raw_syscalls:sys_enter"])
            .arg("--control")
            .arg(format!("fifo:{},{}", ctl.display(), ack.display()))
            .arg("-p")
            .arg(std::process::id().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let mut perf = Perf {
            dir,
            child,
            ctl: None,
            ack: None,
        };
        perf.ctl = Some(perf.open(&ctl, true)?);
        perf.ack = Some(perf.open(&ack, false)?);
        perf.command("enable")?;
        Some(perf)
    }

    /// Whether perf is still running.
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Opens one of perf's FIFOs without blocking (for writing, once perf
    /// opened it), while perf runs, until [`PERF_DEADLINE`].
    fn open(&mut self, path: &Path, write: bool) -> Option<File> {
        let deadline = Instant::now() + PERF_DEADLINE;
        loop {
            let opened = OpenOptions::new()
                .read(!write)
                .write(write)
                .custom_flags(libc::O_NONBLOCK)
                .open(path);
            match opened {
                Ok(file) => return Some(file),
                Err(_) if Instant::now() < deadline && self.alive() => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return None,
            }
        }
    }

    /// Sends `command` and waits for perf's `ack` (which perf writes with
    /// its terminating NUL).
    fn command(&mut self, command: &str) -> Option<()> {
        let line = format!("{command}\n");
        self.ctl.as_mut()?.write_all(line.as_bytes()).ok()?;
        let deadline = Instant::now() + PERF_DEADLINE;
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while !got.windows(4).any(|w| w == b"ack\n") {
            match self.ack.as_mut()?.read(&mut buf) {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ if Instant::now() < deadline && self.alive() => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                _ => return None,
            }
        }
        Some(())
    }

    /// Disables the events and ends perf: the syscalls it counted.
    fn stop(mut self) -> Option<u64> {
        self.command("disable")?;
        // SAFETY: signals perf, our own child, which has not been reaped.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        let deadline = Instant::now() + PERF_DEADLINE;
        while self.alive() {
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut text = String::new();
        self.child.stderr.take()?.read_to_string(&mut text).ok()?;
        let line = text
            .lines()
            .find(|l| l.contains("raw_syscalls:sys_enter"))?;
        // "<not counted>" or "<not supported>": no figure.
        line.split(',').next()?.trim().parse().ok()
    }
}

impl Drop for Perf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // `dir` removes itself after this.
    }
}

/// Makes a FIFO at `path`.
fn mkfifo(path: &Path) -> Option<()> {
    let path = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a valid NUL-terminated path.
    (unsafe { libc::mkfifo(path.as_ptr(), 0o600) } == 0).then_some(())
}

/// This process's context switches so far (voluntary, involuntary), all
/// its threads together, ended ones included.
fn switches() -> (i64, i64) {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    (usage.ru_nvcsw, usage.ru_nivcsw)
}
