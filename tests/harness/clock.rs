//! A node whose wall clock the test moves: `redis-server` runs with
//! `clockshift.c` preloaded, which adds the offset written to a file in the
//! node's directory to every wall-clock read (monotonic clocks stay), as
//! an NTP step, a resumed VM or `date -s` would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::Node;

/// The preload library, compiled once per test process with `cc`.
pub fn library() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        // Written out from the source compiled in, so that whichever crate
        // includes the harness (the tests, the examples, the bench) finds it.
        let source =
            std::env::temp_dir().join(format!("redlock-sync-clockshift-{}.c", std::process::id()));
        std::fs::write(&source, include_str!("clockshift.c")).expect("write clockshift.c");
        let out =
            std::env::temp_dir().join(format!("redlock-sync-clockshift-{}.so", std::process::id()));
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&out)
            .arg(&source)
            .status()
            .unwrap_or_else(|e| panic!("cc, to build the clock-shift library, failed: {e}"));
        assert!(status.success(), "cc could not build {}", source.display());
        out
    })
}

impl Node {
    /// The file the node's preloaded library reads its offset from.
    pub(super) fn clock_file(&self) -> PathBuf {
        self.dir.join("clock-offset")
    }

    /// Sets the node's wall clock `ms` milliseconds ahead of the machine's
    /// (behind if negative), from its next read on. Needs
    /// `NodeOptions::shift_clock`.
    pub fn set_clock_offset(&self, ms: i64) {
        assert!(
            self.options.shift_clock,
            "start the node with NodeOptions::shift_clock to move its clock"
        );
        // Written whole, then renamed: the node never reads half a number.
        let tmp = self.dir.join("clock-offset.new");
        std::fs::write(&tmp, ms.to_string()).expect("write the clock offset");
        std::fs::rename(&tmp, self.clock_file()).expect("install the clock offset");
    }

    /// The node's wall clock (`TIME`) in milliseconds.
    pub fn time_ms(&self) -> i64 {
        let (secs, micros): (i64, i64) = self.query(&redis::cmd("TIME"));
        secs * 1000 + micros / 1000
    }
}
