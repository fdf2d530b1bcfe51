//! Cross-process test helper: re-runs the current test binary as the other process,
//! running its `child_entry` test with an environment variable that selects a role, and
//! talks to it over stdin/stdout (`CHILD <key> <value>` lines).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// How long a child may take for one reply ([`Peer::expect`]) or to exit once asked
/// ([`Peer::finish`], [`Peer::kill`]); it is killed after that and the test fails.
pub const CHILD_LIMIT: Duration = Duration::from_secs(120);

/// A child process running this test binary's child test in some role.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Peer {
    /// Runs the test `child_test` (its full name, e.g. `ipc::child_entry`) of this binary
    /// in a new process, with `role_var=role` and `env` set.
    pub fn spawn(child_test: &str, role_var: &str, role: &str, env: &[(&str, String)]) -> Peer {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new(exe);
        cmd.args([child_test, "--exact", "--nocapture", "--include-ignored"])
            .env(role_var, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn the child process");
        let stdout = child.stdout.take().expect("child stdout");
        let stdin = child.stdin.take();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Peer {
            child,
            stdin,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// The value of the child's next `CHILD <key> <value>` line.
    pub fn expect(&mut self, key: &str) -> String {
        let prefix = format!("CHILD {key} ");
        loop {
            match self.lines.recv_timeout(CHILD_LIMIT) {
                Ok(line) => {
                    if let Some(v) = line.strip_prefix(&prefix) {
                        return v.to_string();
                    }
                    self.seen.push(line);
                }
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    panic!(
                        "child timed out waiting for {key:?}; output: {:#?}",
                        self.seen
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("child ended before {key:?}; output: {:#?}", self.seen)
                }
            }
        }
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin");
        writeln!(stdin, "{line}").expect("write to child");
        stdin.flush().expect("flush child stdin");
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the child (SIGKILL) and reaps it (within [`CHILD_LIMIT`]); returns how it
    /// ended.
    pub fn kill(mut self) -> ExitStatus {
        let _ = self.child.kill();
        self.wait_exit(CHILD_LIMIT).0
    }

    /// Closes the child's stdin and waits for it to exit successfully, at most
    /// [`CHILD_LIMIT`].
    pub fn finish(self) {
        self.finish_within(CHILD_LIMIT)
    }

    /// Closes the child's stdin and waits for it to exit successfully, at most `limit`
    /// (then it is killed and the test fails).
    pub fn finish_within(self, limit: Duration) {
        let (status, seen) = self.wait_exit(limit);
        assert!(
            status.success(),
            "child failed: {status}; output: {seen:#?}"
        );
    }

    /// Closes the child's stdin and waits at most `limit` for it to exit: its status
    /// and every line it printed that no [`expect`](Self::expect) took. A child still
    /// running after `limit` is killed (SIGKILL) and the test fails.
    pub fn wait_exit(mut self, limit: Duration) -> (ExitStatus, Vec<String>) {
        drop(self.stdin.take());
        let pid = self.child.id();
        let mut child = self.child;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait());
        });
        let status = match rx.recv_timeout(limit) {
            Ok(r) => r.expect("wait for the child"),
            Err(_) => {
                // Safety: `kill` with a valid signal; the child is not reaped yet (its
                // waiter has not returned), so `pid` still names it.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                let _ = rx.recv_timeout(limit);
                panic!(
                    "child {pid} did not exit within {limit:?} (killed); output: {:#?}",
                    self.seen
                );
            }
        };
        // The reader sees the end of the child's output right after it exits.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(10)) {
            self.seen.push(line);
        }
        (status, self.seen)
    }
}

/// Prints a `CHILD key value` line for the parent.
pub fn say(key: &str, value: impl std::fmt::Display) {
    println!("CHILD {key} {value}");
    std::io::stdout().flush().expect("flush stdout");
}

/// Waits for a line from the parent.
pub fn wait_line() -> String {
    let mut s = String::new();
    std::io::stdin()
        .read_line(&mut s)
        .expect("read a line from the parent");
    s.trim().to_string()
}

/// A variable the parent set for the child.
pub fn env(k: &str) -> String {
    std::env::var(k).unwrap_or_else(|_| panic!("child needs {k}"))
}

/// FNV-1a 64 of some bytes (a cheap content fingerprint).
pub fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h = (h ^ x as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}
