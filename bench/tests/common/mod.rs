//! Starts the real `relcache-server` binary for the bench tests.
//!
//! The binary belongs to the root package, so `CARGO_BIN_EXE_relcache-server` is not
//! available here: it is found next to this test's own executable
//! (`<target>/<profile>/deps/<test>` → `<target>/<profile>/relcache-server`), which
//! `cargo test --workspace` builds. A missing binary fails the test loudly.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn server_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable is under <target>/<profile>/deps");
    let bin = dir.join("relcache-server");
    assert!(
        bin.exists(),
        "relcache-server binary not found at {}: build it first with \
         `cargo build --bin relcache-server` (cargo test --workspace builds it)",
        bin.display()
    );
    bin
}

/// A relcache-server on a free port, killed on drop.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    pub fn start() -> Server {
        let mut child = Command::new(server_bin())
            .args(["--port", "0", "--bind", "127.0.0.1"])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn relcache-server");
        let stderr = child.stderr.take().expect("stderr piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let port = line
                    .split("local_addr=")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse::<u16>().ok());
                if let (Some(p), Some(t)) = (port, tx.as_ref()) {
                    let _ = t.send(p);
                    tx = None;
                }
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(p) => p,
            Err(_) => {
                let _ = child.kill();
                panic!("relcache-server did not report its listening port");
            }
        };
        Server { child, port }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses `relcache-bench <args>` the way the binary does.
pub fn cli(args: &[&str]) -> relcache_bench::cli::Command {
    use clap::Parser;
    let mut all = vec!["relcache-bench"];
    all.extend_from_slice(args);
    relcache_bench::cli::Cli::try_parse_from(all)
        .expect("valid command line")
        .command
}
