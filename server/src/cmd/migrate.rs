//! Moving keys between servers: DUMP, RESTORE, RESTORE-ASKING and MIGRATE, with
//! Redis 7.2's replies and errors (`src/cluster.c`), so `redis-cli --cluster
//! reshard` and backup tools drive relcache as they drive Redis.
//!
//! The payload is `relcache_protocol::dump`'s (`protocol/DUMP.md`): Redis's shape,
//! a string in RDB's encoding (Redis can restore it), a set as its idset table
//! (only relcache can). Expiry travels beside it, as RESTORE's TTL argument.
//!
//! Where this differs from Redis, and why:
//! - RESTORE decodes and validates the payload before it takes the key's lock (a
//!   table is checked in O(its length)), then answers in Redis's order: BUSYKEY,
//!   then a bad TTL, then a bad payload.
//! - MIGRATE reads its keys under their locks, lets the locks go, and talks to the
//!   target under [`crate::offload::offload`]: the network never holds a shard, and
//!   the worker's other clients go on. A key deleted after the target took it is
//!   deleted only if it still holds the value that was sent; one written in the
//!   meantime stays (Redis, single-threaded, has no meantime). So MIGRATE is
//!   refused inside MULTI and scripts, which hold their locks throughout.
//! - FREQ is checked and ignored: relcache has no LFU policy (see OBJECT FREQ).
//!
//! As in Redis, MIGRATE keeps its connection to a target for the next MIGRATE
//! there, closed after 10 s unused (`crate::outbound`), and tries a cached one
//! that the target had closed once more on a fresh connection.
//!
//! Not here: cluster mode. RESTORE-ASKING carries [`spec::ASKING`] for the
//! cluster layer to honour, and MIGRATE sends it only when [`cluster_enabled`].

use std::borrow::Cow;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use relcache_protocol::dump;
use relcache_protocol::idset::Check;
use relcache_protocol::resp::Frame;

use super::spec::{self, CommandSpec, Group, Keys};
use super::{eq_ic, parse_i64, Ctx};
use crate::db::{Free, IdSet, Value};
use crate::error::{CmdError, CmdResult};
use crate::notify;
use crate::outbound::{self, Link};
use crate::server::Server;

const RESTORE_COMPLEXITY: &str = "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).";

pub(super) const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "dump",
        arity: 2,
        flags: spec::READONLY,
        keys: Keys::ONE,
        since: "2.6.0",
        summary: "Returns a serialized representation of the value stored at a key.",
        complexity: "O(1) to access the key and additional O(N*M) to serialize it, where N is the number of Redis objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).",
        handler: dump_cmd,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "restore",
        arity: -4,
        flags: spec::WRITE | spec::DENYOOM | spec::DANGEROUS,
        keys: Keys::ONE,
        since: "2.6.0",
        summary: "Creates a key from the serialized representation of a value.",
        complexity: RESTORE_COMPLEXITY,
        handler: restore,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "restore-asking",
        arity: -4,
        flags: spec::WRITE | spec::DENYOOM | spec::ASKING | spec::DANGEROUS,
        keys: Keys::ONE,
        group: Group::Server,
        since: "3.0.0",
        summary: "An internal command for migrating keys in a cluster.",
        complexity: RESTORE_COMPLEXITY,
        handler: restore,
        ..CommandSpec::DEFAULT
    },
    CommandSpec {
        name: "migrate",
        arity: -6,
        flags: spec::WRITE | spec::DANGEROUS,
        keys: Keys::Migrate,
        since: "2.6.0",
        summary: "Atomically transfers a key from one Redis instance to another.",
        complexity: "This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target instance. See the pages of these commands for time complexity. Also an O(N) data transfer between the two instances is performed.",
        handler: migrate,
        ..CommandSpec::DEFAULT
    },
];

/// Whether this server runs in cluster mode, so MIGRATE sends RESTORE-ASKING (a
/// target importing the slot takes it without a redirection); a standalone
/// target may not know RESTORE-ASKING, so only then.
fn cluster_enabled(server: &Server) -> bool {
    server.cluster.enabled()
}

// ---------------------------------------------------------------------------------
// DUMP.

/// A value's payload. Encoding copies the value, so large ones are encoded
/// offloaded, after the lock is gone.
fn payload_of(value: &Value) -> Vec<u8> {
    let encode = || match value {
        Value::Str(s) => dump::encode_string(s),
        Value::IdSet(set) => dump::encode_idset(set.bytes(), set.seq()),
    };
    if value.heap_size() > crate::offload::LARGE_TABLE {
        crate::offload::offload(encode)
    } else {
        encode()
    }
}

fn dump_cmd(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    // A clone shares the stored bytes: the lock is held only to find them.
    let Some(value) = ctx.view().get(args[1]).map(|e| e.value().clone()) else {
        return Ok(Frame::Null);
    };
    ctx.release_view();
    Ok(Frame::Bulk(payload_of(&value).into()))
}

// ---------------------------------------------------------------------------------
// RESTORE.

/// RESTORE's options.
#[derive(Debug, Default, PartialEq, Eq)]
struct RestoreOpts {
    replace: bool,
    absttl: bool,
    /// IDLETIME, in seconds.
    idle: Option<u64>,
}

fn parse_restore_opts(args: &[&[u8]]) -> Result<RestoreOpts, CmdError> {
    let mut o = RestoreOpts::default();
    let mut freq = false;
    let mut j = 4;
    while j < args.len() {
        let more = j + 1 < args.len();
        let a = args[j];
        if eq_ic(a, "replace") {
            o.replace = true;
        } else if eq_ic(a, "absttl") {
            o.absttl = true;
        } else if eq_ic(a, "idletime") && more && !freq {
            j += 1;
            let idle = parse_i64(args[j])?;
            o.idle = Some(
                u64::try_from(idle)
                    .map_err(|_| CmdError::err("Invalid IDLETIME value, must be >= 0"))?,
            );
        } else if eq_ic(a, "freq") && more && o.idle.is_none() {
            j += 1;
            let f = parse_i64(args[j])?;
            if !(0..=255).contains(&f) {
                return Err(CmdError::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq = true;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok(o)
}

/// The value a payload holds, as the keyspace stores it. A string that is a
/// table becomes a set, as SET stores one; one that only starts like a table is
/// refused. Either way a table is checked as SET checks one (`idset-table-check`):
/// a payload's CRC is no proof of who made it. What a server stored under the same
/// level passes again, since in-place updates never make a checked placement wrong.
fn value_of(payload: &[u8], how: Check) -> Result<Value, CmdError> {
    let bad = |e: dump::DumpError| CmdError::err(e.to_string());
    Ok(match dump::decode(payload, how).map_err(bad)? {
        dump::Value::Str(s) if relcache_protocol::idset::looks_like_table(&s) => {
            let table = Bytes::copy_from_slice(&s);
            Value::IdSet(IdSet::from_client(table, how).map_err(|_| bad(dump::DumpError::BadData))?)
        }
        dump::Value::Str(Cow::Borrowed(s)) => Value::Str(Bytes::copy_from_slice(s)),
        dump::Value::Str(Cow::Owned(s)) => Value::Str(s.into()),
        dump::Value::IdSet { table, seq } => {
            Value::IdSet(IdSet::from_valid(Bytes::copy_from_slice(table)).with_seq(seq))
        }
    })
}

/// RESTORE and RESTORE-ASKING.
fn restore(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let opts = parse_restore_opts(args)?;
    // Parsed and decoded before the lock, reported in Redis's order under it.
    let ttl = parse_i64(args[2]).and_then(|t| {
        u64::try_from(t).map_err(|_| CmdError::err("Invalid TTL value, must be >= 0"))
    });
    let value = value_of(args[3], ctx.server.config.table_check());
    let key = args[1];
    let v = ctx.view();
    if !opts.replace && v.contains(key) {
        return Err(CmdError::Coded(
            "BUSYKEY Target key name already exists.".into(),
        ));
    }
    let ttl = ttl?;
    let value = value?;
    let now = v.now_ms();
    let expire_at = match ttl {
        0 => 0,
        t if opts.absttl => t,
        t => t.saturating_add(now),
    };
    if expire_at != 0 && expire_at <= now {
        // Already expired: nothing is created, and a replaced key is deleted.
        if opts.replace && v.delete(key, Free::Now) {
            ctx.notify(notify::GENERIC, "del", key);
        }
        return Ok(Frame::ok());
    }
    let lru = v.db().lru_clock();
    v.insert(key, value, expire_at);
    if let (Some(idle), Some(e)) = (opts.idle, v.peek(key)) {
        let idle_ms = idle.saturating_mul(1000).min(u64::from(u32::MAX)) as u32;
        e.touch(lru.wrapping_sub(idle_ms));
    }
    // Redis deletes a replaced key and adds the new one: always `new`, then
    // `restore`.
    ctx.notify_write(notify::GENERIC, "restore", key, true);
    Ok(Frame::ok())
}

// ---------------------------------------------------------------------------------
// MIGRATE.

/// MIGRATE's options.
#[derive(Debug, PartialEq, Eq)]
struct MigrateOpts<'a> {
    copy: bool,
    replace: bool,
    /// AUTH's password, or AUTH2's username and password.
    auth: Option<(Option<&'a [u8]>, &'a [u8])>,
    /// Where the keys start, and how many.
    first_key: usize,
    num_keys: usize,
    /// In milliseconds; 1000 when given as 0 or less.
    timeout: Duration,
    db: i64,
}

fn parse_migrate_opts<'a>(args: &[&'a [u8]]) -> Result<MigrateOpts<'a>, CmdError> {
    let mut o = MigrateOpts {
        copy: false,
        replace: false,
        auth: None,
        first_key: 3,
        num_keys: 1,
        timeout: Duration::ZERO,
        db: 0,
    };
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let a = args[j];
        if eq_ic(a, "copy") {
            o.copy = true;
        } else if eq_ic(a, "replace") {
            o.replace = true;
        } else if eq_ic(a, "auth") {
            if more < 1 {
                return Err(CmdError::Syntax);
            }
            j += 1;
            o.auth = Some((None, args[j]));
        } else if eq_ic(a, "auth2") {
            if more < 2 {
                return Err(CmdError::Syntax);
            }
            o.auth = Some((Some(args[j + 1]), args[j + 2]));
            j += 2;
        } else if eq_ic(a, "keys") {
            if !args[3].is_empty() {
                return Err(CmdError::err(
                    "When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            o.first_key = j + 1;
            o.num_keys = more;
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let timeout = parse_i64(args[5])?;
    o.db = parse_i64(args[4])?;
    let ms = if timeout <= 0 { 1000 } else { timeout as u64 };
    o.timeout = Duration::from_millis(ms);
    Ok(o)
}

/// A key to send: its name, value (sharing the stored bytes) and expiry.
struct Outgoing {
    key: Bytes,
    value: Value,
    expire_at: Option<u64>,
}

/// How a MIGRATE's exchange with its target ended.
enum Sent {
    /// Every reply read: which keys the target took, and its first error.
    Replied {
        taken: Vec<bool>,
        error: Option<Vec<u8>>,
    },
    /// The socket failed after `taken` replies were read.
    Failed {
        taken: Vec<bool>,
        writing: bool,
        retry: bool,
    },
}

fn migrate(ctx: &mut Ctx<'_, '_>, args: &[&[u8]]) -> CmdResult {
    let opts = parse_migrate_opts(args)?;
    if ctx.in_exec() {
        // Inside MULTI or a script the locks are held throughout: the network
        // must not hold them.
        return Err(CmdError::err(
            "MIGRATE is not allowed inside MULTI or scripts in relcache",
        ));
    }
    let asking = cluster_enabled(ctx.server);
    // The keys stay locked through the exchange with the target: a write that
    // landed between sending a key and deleting it here would be kept on both
    // nodes, and reshard would then stop at BUSYKEY. Redis, single-threaded,
    // blocks every client meanwhile; this blocks the keys' shards.
    let v = ctx.view();
    let now = v.now_ms();
    let keys = &args[opts.first_key..opts.first_key + opts.num_keys];
    let outgoing: Vec<Outgoing> = keys
        .iter()
        .filter_map(|k| {
            let e = v.get(k)?;
            Some(Outgoing {
                key: Bytes::copy_from_slice(k),
                value: e.value().clone(),
                expire_at: e.expire_at(),
            })
        })
        .collect();
    if outgoing.is_empty() {
        return Ok(Frame::Simple(Bytes::from_static(b"NOKEY")));
    }
    let (host, port) = (args[1], args[2]);
    let sent = crate::offload::offload(|| {
        let request = restore_requests(&opts, &outgoing, now, asking);
        exchange(host, port, &opts, &request, outgoing.len())
    });
    let (taken, reply) = match sent {
        // Redis's non-blocking connect learns of a refusal only when it writes.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(CmdError::Coded(
                "IOERR error or timeout writing to target instance".into(),
            ))
        }
        Err(_) => {
            return Err(CmdError::Coded(
                "IOERR error or timeout connecting to the client".into(),
            ))
        }
        Ok(Sent::Replied { taken, error: None }) => (taken, Ok(Frame::ok())),
        Ok(Sent::Replied {
            taken,
            error: Some(e),
        }) => {
            let text = String::from_utf8_lossy(&e).into_owned();
            let e = CmdError::err(format!("Target instance replied with error: {text}"));
            (taken, Err(e))
        }
        Ok(Sent::Failed { taken, writing, .. }) => {
            let what = if writing { "writing" } else { "reading" };
            let e = CmdError::Coded(format!("IOERR error or timeout {what} to target instance"));
            (taken, Err(e))
        }
    };
    if !opts.copy && taken.contains(&true) {
        let mut deleted = Vec::new();
        for (o, _) in outgoing.iter().zip(&taken).filter(|(_, &t)| t) {
            if v.delete(&o.key, Free::Now) {
                deleted.push(&o.key);
            }
        }
        for key in deleted {
            ctx.notify(notify::GENERIC, "del", key);
        }
    }
    reply
}

/// The RESTOREs for `outgoing`, each with the key's TTL left (at least 1 ms).
fn restore_requests(
    opts: &MigrateOpts<'_>,
    outgoing: &[Outgoing],
    now: u64,
    asking: bool,
) -> BytesMut {
    let mut out = BytesMut::new();
    let name: &[u8] = if asking {
        b"RESTORE-ASKING"
    } else {
        b"RESTORE"
    };
    for o in outgoing {
        let ttl = o.expire_at.map_or(0, |at| at.saturating_sub(now).max(1));
        let ttl = itoa::Buffer::new().format(ttl).as_bytes().to_vec();
        let payload = payload_of(&o.value);
        let mut parts: Vec<&[u8]> = vec![name, &o.key, &ttl, &payload];
        if opts.replace {
            parts.push(b"REPLACE");
        }
        encode_request(&mut out, &parts);
    }
    out
}

/// Appends `parts` as one RESP request, the payloads copied once, straight in.
fn encode_request(out: &mut BytesMut, parts: &[&[u8]]) {
    let mut n = itoa::Buffer::new();
    let len: usize = parts.iter().map(|p| p.len() + 16).sum();
    out.reserve(len + 16);
    out.extend_from_slice(b"*");
    out.extend_from_slice(n.format(parts.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for p in parts {
        out.extend_from_slice(b"$");
        out.extend_from_slice(n.format(p.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
}

/// Sends AUTH and SELECT as needed and the RESTOREs on a link to the target, and
/// reads every reply. A cached link the target had closed is replaced once, when
/// nothing was taken and it was not a timeout (as Redis retries).
fn exchange(
    host: &[u8],
    port: &[u8],
    opts: &MigrateOpts<'_>,
    restores: &[u8],
    n: usize,
) -> std::io::Result<Sent> {
    let mut link = outbound::take(host, port, opts.timeout)?;
    let mut sent = attempt(&mut link, opts, restores, n);
    if let Sent::Failed { retry: true, .. } = sent {
        link = outbound::take(host, port, opts.timeout)?;
        sent = attempt(&mut link, opts, restores, n);
    }
    match &sent {
        Sent::Replied { error: None, .. } => {
            link.db = Some(opts.db);
            outbound::give_back(host, port, link);
        }
        Sent::Replied { .. } => {
            // An error may have come from SELECT: select again next time.
            link.db = None;
            outbound::give_back(host, port, link);
        }
        Sent::Failed { .. } => {} // Dropped: closed.
    }
    Ok(sent)
}

fn attempt(link: &mut Link, opts: &MigrateOpts<'_>, restores: &[u8], n: usize) -> Sent {
    let mut out = BytesMut::new();
    if let Some((user, pass)) = opts.auth {
        let mut parts: Vec<&[u8]> = vec![b"AUTH"];
        parts.extend(user);
        parts.push(pass);
        encode_request(&mut out, &parts);
    }
    let select = link.db != Some(opts.db);
    if select {
        let db = itoa::Buffer::new().format(opts.db).as_bytes().to_vec();
        encode_request(&mut out, &[b"SELECT", &db]);
    }
    let reused = link.reused;
    // Only a cached link is tried again: the target may have closed it while idle.
    let failed = |taken: Vec<bool>, writing: bool, e: &std::io::Error| Sent::Failed {
        retry: reused && taken.is_empty() && !outbound::is_timeout(e),
        taken,
        writing,
    };
    // AUTH and SELECT, then the RESTOREs as built (no copy of the payloads).
    if let Err(e) = link.write_all(&out).and_then(|()| link.write_all(restores)) {
        return failed(Vec::new(), true, &e);
    }
    // An AUTH or SELECT refused fails every key, as Redis counts it.
    let mut first_error = None;
    for sent in [opts.auth.is_some(), select] {
        if !sent {
            continue;
        }
        match link.read_line() {
            Ok(line) if line.first() == Some(&b'-') => {
                first_error.get_or_insert_with(|| line[1..].to_vec());
            }
            Ok(_) => {}
            Err(e) => return failed(Vec::new(), false, &e),
        }
    }
    let refused_before = first_error.is_some();
    let mut error = first_error;
    let mut taken = Vec::with_capacity(n);
    for _ in 0..n {
        match link.read_line() {
            Ok(line) if refused_before || line.first() == Some(&b'-') => {
                error.get_or_insert_with(|| line.get(1..).unwrap_or_default().to_vec());
                taken.push(false);
            }
            Ok(_) => taken.push(true),
            Err(e) => return failed(taken, false, &e),
        }
    }
    Sent::Replied { taken, error }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::test_args as args;

    #[test]
    fn restore_options_follow_redis() {
        let o = |a: &[&str]| parse_restore_opts(&args(a));
        let base = ["restore", "k", "0", "p"];
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            o(&v)
        };
        assert_eq!(
            with(&["REPLACE", "absttl", "IDLETIME", "5"]),
            Ok(RestoreOpts {
                replace: true,
                absttl: true,
                idle: Some(5)
            })
        );
        assert_eq!(
            with(&["IDLETIME", "-1"]),
            Err(CmdError::err("Invalid IDLETIME value, must be >= 0"))
        );
        assert_eq!(
            with(&["FREQ", "256"]),
            Err(CmdError::err("Invalid FREQ value, must be >= 0 and <= 255"))
        );
        assert_eq!(with(&["FREQ", "x"]), Err(CmdError::NotInteger));
        // IDLETIME and FREQ exclude each other; a missing value is a syntax error.
        assert_eq!(with(&["FREQ", "1", "IDLETIME", "1"]), Err(CmdError::Syntax));
        assert_eq!(with(&["IDLETIME"]), Err(CmdError::Syntax));
        assert_eq!(with(&["NX"]), Err(CmdError::Syntax));
    }

    #[test]
    fn migrate_options_follow_redis() {
        let a = args(&[
            "migrate", "h", "1", "", "3", "0", "COPY", "AUTH2", "u", "p", "KEYS", "a", "b",
        ]);
        let o = parse_migrate_opts(&a).unwrap();
        assert!(o.copy && !o.replace);
        assert_eq!(o.auth, Some((Some(&b"u"[..]), &b"p"[..])));
        assert_eq!((o.first_key, o.num_keys, o.db), (11, 2, 3));
        assert_eq!(o.timeout, Duration::from_millis(1000), "0 means 1000 ms");
        let bad = |a: &[&str]| parse_migrate_opts(&args(a)).err();
        assert_eq!(
            bad(&["migrate", "h", "1", "k", "0", "5", "KEYS", "a"]),
            Some(CmdError::err(
                "When using MIGRATE KEYS option, the key argument must be set to the empty string"
            ))
        );
        assert_eq!(
            bad(&["migrate", "h", "1", "k", "0", "5", "AUTH"]),
            Some(CmdError::Syntax)
        );
        assert_eq!(
            bad(&["migrate", "h", "1", "k", "x", "5"]),
            Some(CmdError::NotInteger)
        );
    }
}
