//! Lua scripting: the script cache, the scripts running now, and the Lua runtime.
//!
//! The command family (`cmd/scripting.rs`) parses EVAL and friends, locks the
//! script's shards and hands the runtime a way to run commands; this module knows
//! nothing of dispatch. Split in three:
//!
//! - here: [`Scripts`], shared by every connection: bodies by SHA1 (EVALSHA works
//!   from any connection), and the registry of running scripts that BUSY and
//!   SCRIPT KILL consult;
//! - [`runtime`]: one Lua state per worker thread, compiled functions cached in it;
//! - [`sandbox`] and [`convert`]: what a script can reach, and how replies become
//!   Lua values and back.

pub mod convert;
mod interrupt;
mod libs;
pub mod runtime;
mod sandbox;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

/// A script's shebang flags (`#!lua flags=no-writes,allow-oom`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub no_writes: bool,
    pub allow_oom: bool,
    /// relcache's own: the script may touch keys it did not declare in KEYS (and
    /// locks every shard to do so).
    pub allow_undeclared_keys: bool,
    /// Whether the script had a shebang at all.
    pub shebang: bool,
}

/// One cached script.
pub struct Script {
    /// Lower-case hex SHA1 of the body, as Redis names it.
    pub sha: String,
    /// The body as sent, shebang line included.
    pub body: Bytes,
    pub flags: Flags,
}

impl Script {
    /// Parses the shebang; the error is Redis's text.
    pub fn new(body: Bytes) -> Result<Script, String> {
        let flags = parse_shebang(&body)?;
        Ok(Script {
            sha: sha1_hex(&body),
            body,
            flags,
        })
    }

    /// What Lua compiles: the shebang line blanked out but its newline kept, so
    /// error line numbers match the body the client sent.
    pub fn code(&self) -> &[u8] {
        if !self.flags.shebang {
            return &self.body;
        }
        match self.body.iter().position(|&b| b == b'\n') {
            Some(nl) => &self.body[nl..],
            None => b"",
        }
    }
}

/// Lower-case hex SHA1 (`redis.sha1hex`, script names).
pub fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

fn parse_shebang(body: &[u8]) -> Result<Flags, String> {
    if !body.starts_with(b"#!") {
        return Ok(Flags::default());
    }
    let line_end = body.iter().position(|&b| b == b'\n').unwrap_or(body.len());
    let line = String::from_utf8_lossy(&body[..line_end]);
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let engine = parts.next().unwrap_or("#!");
    if engine != "#!lua" {
        return Err(format!("Unexpected engine in script shebang: {line}"));
    }
    let mut flags = Flags {
        shebang: true,
        ..Flags::default()
    };
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(format!("Unknown lua shebang option: {part}"));
        };
        for flag in list.split(',').filter(|f| !f.is_empty()) {
            match flag {
                "no-writes" => flags.no_writes = true,
                "allow-oom" => flags.allow_oom = true,
                "allow-undeclared-keys" => flags.allow_undeclared_keys = true,
                // Accepted as Redis does; they change nothing on one node.
                "allow-stale" | "no-cluster" | "allow-cross-slot-keys" => {}
                other => return Err(format!("Unexpected flag in script shebang: {other}")),
            }
        }
    }
    Ok(flags)
}

/// A script running now, as other connections see it.
#[derive(Debug)]
pub struct Running {
    /// The client running it (its own connection is never told BUSY).
    pub client: u64,
    pub started: Instant,
    /// The shards it holds; `None` for every shard.
    pub shards: Option<Vec<usize>>,
    /// Raised by SCRIPT KILL; the instruction hook stops the script.
    pub killed: AtomicBool,
    /// Set once it ran a write: it can no longer be killed without breaking
    /// atomicity.
    pub wrote: AtomicBool,
}

/// A script registered as running; dropping it (after its locks are gone) ends
/// it, and wakes whoever waits, even if the run unwound.
pub struct Registered<'s> {
    scripts: &'s Scripts,
    pub running: Arc<Running>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.scripts.finish(&self.running);
    }
}

/// Whether a command may run while scripts hold shards.
#[derive(Debug, PartialEq, Eq)]
pub enum Holder {
    /// No other client's script holds a shard it needs.
    Free,
    /// One does, and has not yet run past the threshold: the command waits, at
    /// most until `busy_at`, when the first of them will have.
    Running { busy_at: Instant },
    /// One does and has run past the threshold: the command is answered BUSY.
    Busy,
}

/// What SCRIPT KILL found.
#[derive(Debug, PartialEq, Eq)]
pub enum Kill {
    Killed,
    NotBusy,
    Unkillable,
}

/// The script cache and the running scripts, shared by every connection.
pub struct Scripts {
    cache: RwLock<HashMap<String, Arc<Script>>>,
    /// Raised by SCRIPT FLUSH: each thread's runtime drops what it compiled.
    generation: AtomicU64,
    running: Mutex<Vec<Arc<Running>>>,
    /// `running.len()`, read without the lock on every command.
    active: AtomicUsize,
    /// Signalled each time a script ends: commands parked behind one run again.
    ended: tokio::sync::watch::Sender<()>,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            cache: RwLock::default(),
            generation: AtomicU64::new(0),
            running: Mutex::default(),
            active: AtomicUsize::new(0),
            ended: tokio::sync::watch::channel(()).0,
        }
    }
}

impl Scripts {
    pub fn get(&self, sha: &str) -> Option<Arc<Script>> {
        self.cache.read().get(sha).cloned()
    }

    pub fn insert(&self, script: Arc<Script>) {
        self.cache
            .write()
            .entry(script.sha.clone())
            .or_insert(script);
    }

    pub fn contains(&self, sha: &str) -> bool {
        self.cache.read().contains_key(sha)
    }

    /// SCRIPT FLUSH: forgets every script, here and in every thread's runtime.
    pub fn flush(&self) {
        self.cache.write().clear();
        self.generation.fetch_add(1, Relaxed);
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }

    /// Registers a script of `client` that needs `shards` (`None`: every shard),
    /// unless another client's script holds one of them: then what that one's
    /// standing is, and nothing is registered. Checking and registering under one
    /// lock means two scripts never both pass and then queue on each other's shard
    /// locks, where the second would hold a worker thread and never hear BUSY.
    pub fn try_start(
        &self,
        client: u64,
        shards: Option<Vec<usize>>,
        threshold: Duration,
    ) -> Result<Registered<'_>, Holder> {
        let mut running = self.running.lock();
        match standing(&running, client, shards.as_deref(), threshold) {
            Holder::Free => {}
            held => return Err(held),
        }
        let r = Arc::new(Running {
            client,
            started: Instant::now(),
            shards,
            killed: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
        });
        running.push(r.clone());
        self.active.store(running.len(), Relaxed);
        Ok(Registered {
            scripts: self,
            running: r,
        })
    }

    fn finish(&self, r: &Arc<Running>) {
        let mut running = self.running.lock();
        running.retain(|x| !Arc::ptr_eq(x, r));
        self.active.store(running.len(), Relaxed);
        drop(running);
        self.ended.send_replace(());
    }

    /// Whether a command of `client` touching `shards` (`None`: every shard) may
    /// run, given the scripts of other clients holding those shards.
    pub fn holder(&self, client: u64, shards: Option<&[usize]>, threshold: Duration) -> Holder {
        if self.active.load(Relaxed) == 0 {
            return Holder::Free;
        }
        standing(&self.running.lock(), client, shards, threshold)
    }

    /// Whether any script runs now.
    pub fn any_running(&self) -> bool {
        self.active.load(Relaxed) != 0
    }

    /// Fires when a script ends after this call.
    pub fn on_end(&self) -> tokio::sync::watch::Receiver<()> {
        self.ended.subscribe()
    }

    /// SCRIPT KILL: stops every running script, unless one has written.
    pub fn kill(&self) -> Kill {
        let running = self.running.lock();
        if running.is_empty() {
            return Kill::NotBusy;
        }
        if running.iter().any(|r| r.wrote.load(Relaxed)) {
            return Kill::Unkillable;
        }
        for r in running.iter() {
            r.killed.store(true, Relaxed);
        }
        Kill::Killed
    }

    /// Stops every running script, written or not: the server is going away
    /// (SHUTDOWN NOSAVE, SIGTERM), and a script that never ends would keep its
    /// connection, and so the process, alive.
    pub fn kill_all(&self) {
        for r in self.running.lock().iter() {
            r.killed.store(true, Relaxed);
        }
    }
}

fn standing(
    running: &[Arc<Running>],
    client: u64,
    shards: Option<&[usize]>,
    threshold: Duration,
) -> Holder {
    let holders = running.iter().filter(|r| {
        r.client != client
            && match (&r.shards, shards) {
                (None, _) | (_, None) => true,
                (Some(held), Some(wanted)) => wanted.iter().any(|s| held.contains(s)),
            }
    });
    let mut found = Holder::Free;
    for r in holders {
        // A threshold past any instant (`u64::MAX` ms) is a century: never, here.
        let busy_at = r
            .started
            .checked_add(threshold)
            .or_else(|| {
                r.started
                    .checked_add(Duration::from_secs(100 * 365 * 86_400))
            })
            .unwrap_or(r.started);
        if threshold == Duration::ZERO || Instant::now() >= busy_at {
            return Holder::Busy;
        }
        found = match found {
            Holder::Running { busy_at: b } if b <= busy_at => found,
            _ => Holder::Running { busy_at },
        };
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_flags_and_errors_follow_redis() {
        let s = Script::new(Bytes::from_static(
            b"#!lua flags=no-writes,allow-oom\nreturn 1",
        ))
        .unwrap();
        assert!(s.flags.no_writes && s.flags.allow_oom && s.flags.shebang);
        assert_eq!(s.code(), b"\nreturn 1");
        assert_eq!(
            parse_shebang(b"#!lua flags=bogus\n").unwrap_err(),
            "Unexpected flag in script shebang: bogus"
        );
        assert_eq!(
            parse_shebang(b"#!lua name=x\n").unwrap_err(),
            "Unknown lua shebang option: name=x"
        );
        assert_eq!(
            parse_shebang(b"#!foo\nreturn 1").unwrap_err(),
            "Unexpected engine in script shebang: #!foo"
        );
        assert_eq!(parse_shebang(b"return 1"), Ok(Flags::default()));
    }

    #[test]
    fn sha1_is_lower_hex() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
    }

    #[test]
    fn busy_only_for_other_clients_on_held_shards() {
        let s = Scripts::default();
        let hour = Duration::from_secs(3600);
        let reg = s.try_start(1, Some(vec![3]), hour).unwrap();
        let r = reg.running.clone();
        let zero = Duration::ZERO;
        assert_eq!(s.holder(2, Some(&[3]), zero), Holder::Busy);
        assert_eq!(s.holder(2, None, zero), Holder::Busy);
        assert_eq!(s.holder(2, Some(&[4]), zero), Holder::Free);
        assert_eq!(s.holder(1, Some(&[3]), zero), Holder::Free);
        let busy_at = r.started + hour;
        assert_eq!(s.holder(2, Some(&[3]), hour), Holder::Running { busy_at });
        // A second script on a held shard is not registered; on another one it is.
        assert_eq!(
            s.try_start(2, Some(vec![3, 5]), hour).err(),
            Some(Holder::Running { busy_at })
        );
        assert!(matches!(s.try_start(2, None, zero), Err(Holder::Busy)));
        drop(s.try_start(2, Some(vec![5]), hour).unwrap());
        let ended = s.on_end();
        assert_eq!(s.kill(), Kill::Killed);
        assert!(r.killed.load(Relaxed));
        s.finish(&r);
        assert!(
            ended.has_changed().unwrap(),
            "a script's end wakes its waiters"
        );
        assert_eq!(s.kill(), Kill::NotBusy);
    }
}
