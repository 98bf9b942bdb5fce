//! Lua scripting: the script cache, the scripts running now, and the Lua runtime.
//!
//! The command family (`cmd/scripting.rs`) parses EVAL and friends, locks the
//! script's shards and hands the runtime a way to run commands; this module knows
//! nothing of dispatch. Split in three:
//!
//! - here: [`Scripts`], shared by every connection: bodies by SHA1 (EVALSHA works
//!   from any connection);
//! - [`registry`]: the scripts running now, by the shards they hold, which BUSY
//!   and SCRIPT KILL consult;
//! - [`affinity`]: a connection's run of scripts that waited for others', which
//!   moves it to the loop their keys call home;
//! - [`runtime`]: one Lua state per worker thread, compiled functions cached in it;
//! - [`sandbox`] and [`convert`]: what a script can reach, and how replies become
//!   Lua values and back.

pub mod affinity;
pub mod convert;
mod interrupt;
mod libs;
mod registry;
pub mod runtime;
mod sandbox;

pub use registry::{Held, Holder, Kill, Registry, Running};

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

/// A script's shebang flags (`#!lua flags=no-writes,allow-oom`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    pub no_writes: bool,
    pub allow_oom: bool,
    /// relcache's own: the script may touch keys it did not declare in KEYS (and
    /// locks every shard to do so).
    pub allow_undeclared_keys: bool,
    /// `no-cluster`: refused on a node in cluster mode.
    pub no_cluster: bool,
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

/// Bodies at most this long are remembered by [`with_body_sha`].
const NAMED_BODY_MAX: usize = 4096;
/// How many bodies [`with_body_sha`] remembers on a thread before it starts over.
const NAMED_BODIES: usize = 64;

/// Runs `f` on the SHA1 name of a script body, as [`sha1_hex`] makes it,
/// remembered for the bodies this thread named lately: EVAL names its body on
/// every call, and hashing a short script cost about as much as running it. A
/// body has one name for good, so the memo needs no invalidation, only a bound:
/// about 260 KB a thread at most. Past 64 bodies it starts over, so a client
/// that sends a new body each time pays a copy and an insert beside the SHA1,
/// small next to the SHA1. `f` must not name a body itself.
pub fn with_body_sha<R>(body: &[u8], f: impl FnOnce(&str) -> R) -> R {
    thread_local! {
        static NAMED: RefCell<ahash::HashMap<Box<[u8]>, String>> = RefCell::default();
    }
    if body.len() > NAMED_BODY_MAX {
        return f(&sha1_hex(body));
    }
    NAMED.with_borrow_mut(|named| {
        if let Some(sha) = named.get(body) {
            return f(sha);
        }
        if named.len() >= NAMED_BODIES {
            named.clear();
        }
        let sha = sha1_hex(body);
        let r = f(&sha);
        named.insert(body.into(), sha);
        r
    })
}

/// Lower-case hex SHA1 (`redis.sha1hex`, script names).
pub fn sha1_hex(data: &[u8]) -> String {
    // By hand rather than through `Display`: EVAL names its body on every call,
    // and the formatting machinery cost twice the hashing of a short script.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(40);
    for b in sha1_smol::Sha1::from(data).digest().bytes() {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    hex
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
                "no-cluster" => flags.no_cluster = true,
                // Accepted as Redis does: relcache has no replicas to be stale,
                // and a script's declared keys must share one slot in a cluster.
                "allow-stale" | "allow-cross-slot-keys" => {}
                other => return Err(format!("Unexpected flag in script shebang: {other}")),
            }
        }
    }
    Ok(flags)
}

/// How many EVAL-cached scripts are kept: Redis 7.4's `LRU_LIST_LENGTH`.
pub const EVAL_CACHE_MAX: usize = 500;

/// How a script came into the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// SCRIPT LOAD: kept until SCRIPT FLUSH, so a client that loaded it can
    /// count on EVALSHA finding it.
    Load,
    /// EVAL: one of at most [`EVAL_CACHE_MAX`], the least recently run evicted
    /// first (Redis 7.4), so a client that builds a new script body for every
    /// call cannot grow the cache without bound.
    Eval,
}

/// The cached scripts, and the run order of those EVAL cached.
#[derive(Default)]
struct Cache {
    /// Each script, with its place in `lru` if it is evictable.
    map: ahash::HashMap<String, (Arc<Script>, Option<u64>)>,
    /// EVAL-cached scripts by last run, oldest first: a tick-ordered map, so a
    /// script moves to the end in O(log n) each time it runs.
    lru: BTreeMap<u64, String>,
    tick: u64,
    /// What the entries take ([`entry_bytes`]).
    bytes: usize,
}

/// What a cached script takes: its body, its entry and its name in the map,
/// and if EVAL cached it, its name again in the run order.
fn entry_bytes(script: &Script, evictable: bool) -> usize {
    let entry = std::mem::size_of::<(String, (Arc<Script>, Option<u64>))>()
        + std::mem::size_of::<Script>()
        + script.body.len()
        + 2 * script.sha.len();
    let order = std::mem::size_of::<(u64, String)>() + script.sha.len();
    entry + if evictable { order } else { 0 }
}

impl Cache {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}

/// The script cache and the running scripts, shared by every connection.
pub struct Scripts {
    /// One lock for the map and the LRU order, held only to look up, insert or
    /// move one script: they must change together.
    cache: Mutex<Cache>,
    /// Raised by SCRIPT FLUSH: each thread's runtime drops what it compiled.
    generation: AtomicU64,
    /// The scripts running now, which BUSY and SCRIPT KILL consult.
    pub running: Registry,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts {
            cache: Mutex::default(),
            generation: AtomicU64::new(0),
            running: Registry::default(),
        }
    }
}

impl Scripts {
    /// The script named `sha` (EVAL, EVALSHA, SCRIPT LOAD): an EVAL-cached one
    /// becomes the last to be evicted, as one about to run should. One lock for
    /// both, since every EVAL takes it; a SCRIPT LOAD or an EVAL refused before it
    /// runs moves it too, which only keeps a script a client uses a little longer.
    pub fn get(&self, sha: &str) -> Option<Arc<Script>> {
        let mut cache = self.cache.lock();
        let (script, old) = cache.map.get(sha).map(|(s, t)| (s.clone(), *t))?;
        if let Some(old) = old {
            let tick = cache.next_tick();
            if let Some(name) = cache.lru.remove(&old) {
                cache.lru.insert(tick, name);
            }
            if let Some(entry) = cache.map.get_mut(sha) {
                entry.1 = Some(tick);
            }
        }
        Some(script)
    }

    /// Caches `script` unless one with its SHA1 is there already. That one
    /// stays, and if EVAL cached it and this is a SCRIPT LOAD, it is kept from
    /// now on, as Redis 7.4 promotes it: a client that loaded a script counts on
    /// EVALSHA finding it. Caching one more EVAL script when [`EVAL_CACHE_MAX`]
    /// are cached evicts the least recently run first; returns the cached script
    /// and how many were evicted (INFO `evicted_scripts`).
    pub fn insert(&self, script: Arc<Script>, origin: Origin) -> (Arc<Script>, u64) {
        let mut cache = self.cache.lock();
        let cache = &mut *cache;
        if let Some((found, tick)) = cache.map.get_mut(&script.sha) {
            if origin == Origin::Load {
                if let Some(tick) = tick.take() {
                    cache.lru.remove(&tick);
                    cache.bytes -= entry_bytes(found, true) - entry_bytes(found, false);
                }
            }
            return (found.clone(), 0);
        }
        let mut evicted = 0;
        let tick = match origin {
            Origin::Load => None,
            Origin::Eval => {
                while cache.lru.len() >= EVAL_CACHE_MAX {
                    let Some((_, oldest)) = cache.lru.pop_first() else {
                        break;
                    };
                    if let Some((gone, _)) = cache.map.remove(&oldest) {
                        cache.bytes -= entry_bytes(&gone, true);
                    }
                    evicted += 1;
                }
                let tick = cache.next_tick();
                cache.lru.insert(tick, script.sha.clone());
                Some(tick)
            }
        };
        cache.bytes += entry_bytes(&script, tick.is_some());
        cache.map.insert(script.sha.clone(), (script.clone(), tick));
        (script, evicted)
    }

    pub fn contains(&self, sha: &str) -> bool {
        self.cache.lock().map.contains_key(sha)
    }

    /// How many scripts are cached.
    pub fn count(&self) -> usize {
        self.cache.lock().map.len()
    }

    /// The cache's own memory (INFO's `used_memory_scripts_eval`), kept as
    /// scripts come and go rather than counted here under the lock every EVAL
    /// takes.
    pub fn memory(&self) -> usize {
        self.cache.lock().bytes
    }

    /// SCRIPT FLUSH: forgets every script, here and in every thread's runtime.
    pub fn flush(&self) {
        *self.cache.lock() = Cache::default();
        self.generation.fetch_add(1, Relaxed);
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache's memory follows its scripts: in as they are cached, out as
    /// EVAL's LRU evicts them and at SCRIPT FLUSH.
    #[test]
    fn the_cache_s_memory_follows_its_scripts() {
        let scripts = Scripts::default();
        let loaded = script("return 'loaded'".repeat(100));
        scripts.insert(loaded.clone(), Origin::Load);
        // Cached again: no second entry.
        scripts.insert(loaded.clone(), Origin::Eval);
        let mut expected = entry_bytes(&loaded, false);
        assert_eq!(scripts.memory(), expected);
        // EVAL cached, then SCRIPT LOADed: off the run order from then on.
        let promoted = script("return 'promoted'".into());
        scripts.insert(promoted.clone(), Origin::Eval);
        assert_eq!(scripts.memory(), expected + entry_bytes(&promoted, true));
        scripts.insert(promoted.clone(), Origin::Load);
        expected += entry_bytes(&promoted, false);
        assert_eq!(scripts.memory(), expected);
        let bodies: Vec<_> = (0..EVAL_CACHE_MAX + 10)
            .map(|i| script(format!("return {i}")))
            .collect();
        for body in &bodies {
            scripts.insert(body.clone(), Origin::Eval);
        }
        // The first ten were evicted, and neither of the loaded ones.
        expected += bodies[10..]
            .iter()
            .map(|b| entry_bytes(b, true))
            .sum::<usize>();
        assert_eq!(scripts.count(), EVAL_CACHE_MAX + 2);
        assert!(scripts.contains(&promoted.sha) && !scripts.contains(&bodies[9].sha));
        assert_eq!(scripts.memory(), expected);
        scripts.flush();
        assert_eq!(scripts.memory(), 0);
    }

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

    fn script(body: String) -> Arc<Script> {
        Arc::new(Script::new(Bytes::from(body)).unwrap())
    }

    #[test]
    fn eval_scripts_are_evicted_least_recently_run_first_and_loaded_ones_never() {
        let s = Scripts::default();
        let loaded = script("return 'loaded'".into());
        assert_eq!(s.insert(loaded.clone(), Origin::Load).1, 0);
        let first = script("return 0".into());
        s.insert(first.clone(), Origin::Eval);
        for i in 1..EVAL_CACHE_MAX {
            assert_eq!(s.insert(script(format!("return {i}")), Origin::Eval).1, 0);
        }
        // Run the oldest again: the next insert evicts `return 1` instead.
        assert!(s.get(&first.sha).is_some());
        let (_, evicted) = s.insert(script("return 'new'".into()), Origin::Eval);
        assert_eq!(evicted, 1);
        assert!(s.contains(&first.sha));
        assert!(!s.contains(&script("return 1".into()).sha));
        assert!(s.contains(&loaded.sha), "SCRIPT LOAD's are never evicted");
        assert_eq!(s.count(), EVAL_CACHE_MAX + 1);
        // EVAL of what SCRIPT LOAD cached keeps it kept and evicts nothing, and
        // SCRIPT LOAD of what EVAL cached keeps it from then on (Redis 7.4).
        assert_eq!(s.insert(loaded.clone(), Origin::Eval).1, 0);
        assert_eq!(s.insert(first.clone(), Origin::Load).1, 0);
        for i in 0..EVAL_CACHE_MAX {
            s.insert(script(format!("return {i} + 1")), Origin::Eval);
        }
        assert!(s.contains(&loaded.sha) && s.contains(&first.sha));
        assert_eq!(s.count(), EVAL_CACHE_MAX + 2);
        s.flush();
        assert_eq!(s.count(), 0);
    }

    #[test]
    fn sha1_is_lower_hex() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
    }

    #[test]
    fn a_remembered_name_is_the_body_s_own() {
        let bodies: Vec<Vec<u8>> = (0..3 * NAMED_BODIES)
            .map(|i| format!("return {i}").into_bytes())
            .chain([vec![b'x'; NAMED_BODY_MAX + 1], Vec::new()])
            .collect();
        // Twice over, so that the second pass meets remembered names and, past
        // the bound, bodies forgotten and named again.
        for body in bodies.iter().chain(&bodies) {
            assert_eq!(with_body_sha(body, str::to_owned), sha1_hex(body));
        }
    }
}
