//! Helpers: a temporary directory, the real binary as a child process, bounded waits.

use std::io::{BufRead as _, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Environment variables the binary reads; cleared so the developer's shell cannot leak in.
const CLEARED_ENV: &[&str] = &[
    "HARE_OUTBOX_CONFIG",
    "HARE_OUTBOX_DATABASE_URL",
    "HARE_OUTBOX_TABLE",
    "HARE_OUTBOX_WEBHOOK_URL",
    "HARE_OUTBOX_WEBHOOK_SECRET",
    "HARE_OUTBOX_DELIVERY_URL",
    "HARE_OUTBOX_WAKEUP_URL",
    "HARE_OUTBOX_BACKLOG_MAX_PENDING",
    "HARE_OUTBOX_BACKLOG_MAX_AGE",
    "HARE_OUTBOX_BACKLOG_MAX_DEAD",
    "HARE_OUTBOX_BACKLOG_MAX_OPEN_DESTINATIONS",
    "HARE_OUTBOX_BACKLOG_RELAY_URL",
    "HARE_OUTBOX_DASHBOARD_TOKEN",
    "RUST_LOG",
];

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(what: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "hare-outbox-cli-{what}-{}-{:08x}",
            std::process::id(),
            rand_u32()
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `text` to `name` in the directory and returns the file's path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rand_u32() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    (nanos ^ std::process::id().rotate_left(16)).wrapping_add(n.wrapping_mul(0x9e37_79b9))
}

/// The `hare-outbox` binary, run in `dir` with a clean hare-outbox environment.
pub fn hare_outbox(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hare-outbox"));
    command.current_dir(dir);
    for name in CLEARED_ENV {
        command.env_remove(name);
    }
    command
}

/// A running child whose stdout and stderr are collected by reader threads.
pub struct Proc {
    pub child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

fn collect(stream: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            sink.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push_str(&line);
            line.clear();
        }
    });
    text
}

impl Proc {
    pub fn spawn(command: &mut Command) -> Proc {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hare-outbox");
        let stdout = collect(child.stdout.take().expect("stdout"));
        let stderr = collect(child.stderr.take().expect("stderr"));
        Proc {
            child,
            stdout,
            stderr,
        }
    }

    pub fn stdout(&self) -> String {
        self.stdout
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Sends `signal` (`TERM`, `INT`) through the shell's `kill`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -s {signal} {}", self.child.id()))
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {signal} failed");
    }

    /// SIGKILL: the process gets no chance to finish anything.
    pub fn kill_hard(&mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// Waits for the exit, at most `timeout`; then kills the child and panics with its output.
    pub async fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                // Let the reader threads drain the pipes.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "hare-outbox did not exit within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until stdout satisfies `check`, at most `timeout`.
    pub async fn wait_for_stdout(
        &mut self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&str) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        while !check(&self.stdout()) {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "hare-outbox exited ({status}) before {what}\nstdout:\n{}\nstderr:\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} waiting for {what}\nstdout:\n{}\nstderr:\n{}",
                self.stdout(),
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs the binary to completion (at most `timeout`) and returns (exit code, stdout, stderr).
pub async fn run(command: &mut Command, timeout: Duration) -> (i32, String, String) {
    let mut proc = Proc::spawn(command);
    let status = proc.wait(timeout).await;
    (status.code().unwrap_or(-1), proc.stdout(), proc.stderr())
}
