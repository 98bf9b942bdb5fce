//! Helpers shared by the server fuzz targets: reading replies (every one must be a
//! well-formed frame), a model of the keyspace to check answers against, and
//! hostile and degenerate idset tables made from fuzz input.
//!
//! The model reads a table's members straight from its flags and slots, never
//! through the protocol crate's hashing reader, so a table that the validator
//! wrongly accepts (an id in a slot its probe sequence never reaches, say) shows up
//! as a wrong answer rather than being agreed with.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};
use bytes::{Bytes, BytesMut};
use relcache_protocol::idset::{
    self, hash, start_and_step, Builder, TableMut, FLAG_HAS_MAX, FLAG_HAS_ZERO, HEADER_LEN,
    OFF_CAPACITY, OFF_COUNT, OFF_DELETED, OFF_FLAGS, OFF_SEED, SLOT_LEN,
};
use relcache_protocol::resp::reply::ReplyDecoder;
use relcache_protocol::resp::{Frame, Limits};
pub use relcache_server::fuzzing::{Client, Harness};
pub use relcache_server::Config;

/// A generous bound on one command's time: only a call that does work out of
/// proportion to its input (a loop over a table's capacity per member, a
/// pathological probe sequence) crosses it, even under a sanitizer.
pub const CALL_TIME_BOUND: Duration = Duration::from_secs(5);

/// The process's server, with every key flushed and no password: setting up a
/// server costs more than most inputs' work, so the runs of a target share one.
/// `fresh` builds a new one first, for a run after one that may have changed more
/// than keys (its configuration, or a SHUTDOWN). What survives from earlier runs
/// (statistics, the slow log, leases) must not matter to any invariant.
pub fn harness(fresh: bool) -> Arc<Harness> {
    static SHARED: Mutex<Option<Arc<Harness>>> = Mutex::new(None);
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if fresh || shared.is_none() {
        *shared = Some(Arc::new(Harness::new(Config::default())));
    }
    let h = shared.clone().expect("just set");
    h.config()
        .set("requirepass", "", true)
        .expect("no password");
    // The model reads tables from their slots, so it agrees with the server only on
    // tables proven in full; what the default sample lets through is covered by the
    // protocol crate's properties and `tests/idset_check.rs`.
    h.config()
        .set("idset-table-check", "full", true)
        .expect("a known value");
    assert_eq!(call(&mut h.connect(), &[b"FLUSHALL"]), Frame::ok());
    h
}

/// Every reply frame in `out`; panics unless `out` is a sequence of complete,
/// well-formed frames.
pub fn frames(out: &[u8]) -> Vec<Frame> {
    let mut buf = BytesMut::from(out);
    let mut decoder = ReplyDecoder::new(Limits::default());
    let mut all = Vec::new();
    loop {
        match decoder.decode(&mut buf) {
            Ok(Some(frame)) => all.push(frame),
            Ok(None) => {
                assert!(
                    buf.is_empty(),
                    "a reply is cut short: {:?}",
                    String::from_utf8_lossy(&buf)
                );
                return all;
            }
            Err(e) => panic!("malformed reply ({e}): {:?}", String::from_utf8_lossy(out)),
        }
    }
}

/// The one reply to `args`, in RESP2/RESP3-neutral form ([`norm`]), within
/// [`CALL_TIME_BOUND`].
pub fn call(c: &mut Client, args: &[&[u8]]) -> Frame {
    let started = Instant::now();
    let out = c.call(args);
    let took = started.elapsed();
    assert!(took < CALL_TIME_BOUND, "{} took {took:?}", show(args));
    let mut replies = frames(&out);
    assert_eq!(replies.len(), 1, "one reply to {}", show(args));
    norm(replies.remove(0))
}

/// A request as text, for assertion messages (long arguments shortened).
pub fn show(args: &[&[u8]]) -> String {
    args.iter()
        .map(|a| {
            let s = String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned();
            if a.len() > 40 {
                format!("{s}…({} bytes)", a.len())
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A reply with the differences between RESP2 and RESP3 spellings taken out: sets
/// and pushes become arrays, booleans integers, the two nulls one.
pub fn norm(f: Frame) -> Frame {
    match f {
        Frame::NullArray => Frame::Null,
        Frame::Boolean(b) => Frame::Integer(b.into()),
        Frame::Array(v) | Frame::Set(v) | Frame::Push(v) => {
            Frame::Array(v.into_iter().map(norm).collect())
        }
        Frame::Integers(v) => Frame::Array(v.into_iter().map(Frame::Integer).collect()),
        Frame::Map(pairs) => Frame::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [norm(k), norm(v)])
                .collect(),
        ),
        other => other,
    }
}

/// The ids in a reply that lists them as decimal bulk strings.
pub fn ids_of(f: &Frame) -> Vec<u64> {
    let Frame::Array(items) = f else {
        panic!("expected a list of ids, got {f:?}");
    };
    items
        .iter()
        .map(|item| match item {
            Frame::Bulk(b) => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("not an id: {b:?}")),
            other => panic!("not an id: {other:?}"),
        })
        .collect()
}

/// The decimal text of an id, as a request argument.
pub fn arg(id: u64) -> Vec<u8> {
    id.to_string().into_bytes()
}

pub fn int(n: u64) -> Frame {
    Frame::Integer(n as i64)
}

pub fn bulk(b: &[u8]) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(b))
}

pub fn is_error(f: &Frame, prefix: &str) -> bool {
    matches!(f, Frame::Error(e) if e.starts_with(prefix.as_bytes()))
}

/// What a key holds, as the model sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Str(Vec<u8>),
    Set(BTreeSet<u64>),
}

/// Checks everything the server says about `key` against what it should hold.
pub fn check_key(c: &mut Client, key: &[u8], want: Option<&Value>) {
    let exists = call(c, &[b"EXISTS", key]);
    assert_eq!(exists, int(want.is_some().into()), "EXISTS {key:?}");
    match want {
        None => {}
        Some(Value::Str(s)) => assert_eq!(call(c, &[b"GET", key]), bulk(s), "GET {key:?}"),
        Some(Value::Set(ids)) => {
            let mut got = ids_of(&call(c, &[b"SMEMBERS", key]));
            got.sort_unstable();
            assert_eq!(
                got,
                ids.iter().copied().collect::<Vec<_>>(),
                "SMEMBERS {key:?}"
            );
            assert_eq!(
                call(c, &[b"SCARD", key]),
                int(ids.len() as u64),
                "SCARD {key:?}"
            );
        }
    }
}

/// The members a table's bytes hold, read straight from the flags and the slots
/// (no hashing): what any reader of FORMAT.md must answer for a table it accepts.
pub fn raw_members(bytes: &[u8]) -> BTreeSet<u64> {
    let mut ids = BTreeSet::new();
    let flags = bytes.get(OFF_FLAGS).copied().unwrap_or(0);
    if flags & FLAG_HAS_ZERO != 0 {
        ids.insert(0);
    }
    if flags & FLAG_HAS_MAX != 0 {
        ids.insert(u64::MAX);
    }
    let slots = bytes.get(HEADER_LEN..).unwrap_or_default();
    ids.extend(
        slots
            .chunks_exact(SLOT_LEN)
            .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
            .filter(|&id| id != idset::EMPTY && id != idset::DELETED),
    );
    ids
}

/// An id from the fuzz input: mostly from a small pool (so that adds and removes
/// meet), sometimes the two marker values or anything.
pub fn id(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0u8..=9)? {
        0 => 0,
        1 => u64::MAX,
        2 => u.arbitrary()?,
        3 => u64::MAX - u64::from(u.arbitrary::<u8>()?),
        _ => u64::from(u.int_in_range(1u8..=40)?),
    })
}

/// Up to `max` ids from the fuzz input, at least one.
pub fn ids(u: &mut Unstructured<'_>, max: usize) -> Result<Vec<u64>> {
    let n = u.int_in_range(1..=max)?;
    (0..n).map(|_| id(u)).collect()
}

/// A builder with a seed, load and reserve from the fuzz input.
fn builder(u: &mut Unstructured<'_>, max_reserve: usize) -> Result<Builder> {
    let load = *u.choose(&[0.1, 0.5, 0.75, 0.9, 1.0])?;
    let seed = if u.arbitrary()? {
        idset::DEFAULT_SEED
    } else {
        u.arbitrary()?
    };
    Ok(Builder::new()
        .seed(seed)
        .max_load(load)
        .reserve(u.int_in_range(0..=max_reserve)?))
}

/// A valid table of a few ids with some removed again (tombstones), then maybe
/// damaged by [`mutate`]: what a buggy or hostile client might SET.
pub fn hostile_table(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let ids = ids(u, 24)?;
    let mut bytes = builder(u, 64)?
        .try_build(&ids)
        .map_err(|_| arbitrary::Error::IncorrectFormat)?;
    remove_some(u, &mut bytes, &ids)?;
    let n = u.int_in_range(0u8..=3)?;
    for _ in 0..n {
        mutate(u, &mut bytes)?;
    }
    Ok(bytes)
}

/// Removes a fuzz-chosen share of `ids` from the table in place, leaving tombstones.
fn remove_some(u: &mut Unstructured<'_>, bytes: &mut [u8], ids: &[u64]) -> Result<()> {
    let Ok(mut table) = TableMut::open(bytes) else {
        return Ok(());
    };
    for &id in ids {
        if u.ratio(1, 3)? {
            table.remove(id);
        }
    }
    Ok(())
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    if let Some(field) = bytes.get_mut(at..at + 4) {
        field.copy_from_slice(&v.to_le_bytes());
    }
}

fn get_u32(bytes: &[u8], at: usize) -> u32 {
    bytes
        .get(at..at + 4)
        .map_or(0, |f| u32::from_le_bytes(f.try_into().expect("4 bytes")))
}

/// One damage to a table: a flipped byte, a wrong count, capacity, deleted count,
/// flags or seed, an id written into some slot, two slots swapped, or a length
/// that no longer matches the capacity.
pub fn mutate(u: &mut Unstructured<'_>, bytes: &mut Vec<u8>) -> Result<()> {
    let slots = bytes.len().saturating_sub(HEADER_LEN) / SLOT_LEN;
    match u.int_in_range(0u8..=9)? {
        0 if !bytes.is_empty() => {
            let i = u.choose_index(bytes.len())?;
            bytes[i] ^= u.int_in_range(1u8..=255)?;
        }
        1 => {
            let count = get_u32(bytes, OFF_COUNT);
            let v = match u.int_in_range(0u8..=2)? {
                0 => count.wrapping_add(1),
                1 => count.wrapping_sub(1),
                _ => u.arbitrary()?,
            };
            put_u32(bytes, OFF_COUNT, v);
        }
        2 => {
            let cap = get_u32(bytes, OFF_CAPACITY);
            let v = match u.int_in_range(0u8..=3)? {
                0 => cap.wrapping_add(1),
                1 => idset::next_prime(u64::from(cap) + 1).unwrap_or(2),
                2 => *u.choose(&[2, 3, 5, idset::MAX_CAPACITY])?,
                _ => u.arbitrary()?,
            };
            put_u32(bytes, OFF_CAPACITY, v);
        }
        3 => {
            let deleted = get_u32(bytes, OFF_DELETED);
            let v = if u.arbitrary()? {
                deleted.wrapping_add(1)
            } else {
                u.arbitrary()?
            };
            put_u32(bytes, OFF_DELETED, v);
        }
        4 if bytes.len() > OFF_FLAGS => bytes[OFF_FLAGS] = u.arbitrary()?,
        5 if bytes.len() >= OFF_SEED + 8 => {
            let seed: u64 = u.arbitrary()?;
            bytes[OFF_SEED..OFF_SEED + 8].copy_from_slice(&seed.to_le_bytes());
        }
        6 if slots > 0 => {
            let at = HEADER_LEN + u.choose_index(slots)? * SLOT_LEN;
            let v = id(u)?;
            bytes[at..at + SLOT_LEN].copy_from_slice(&v.to_le_bytes());
        }
        7 if slots > 1 => {
            let (i, j) = (u.choose_index(slots)?, u.choose_index(slots)?);
            for k in 0..SLOT_LEN {
                bytes.swap(HEADER_LEN + i * SLOT_LEN + k, HEADER_LEN + j * SLOT_LEN + k);
            }
        }
        8 => {
            if u.arbitrary()? {
                let cut = u.int_in_range(1..=bytes.len().clamp(1, 16))?;
                bytes.truncate(bytes.len().saturating_sub(cut));
            } else {
                bytes.extend_from_slice(&id(u)?.to_le_bytes());
            }
        }
        _ => {
            if let Some(last) = bytes.last_mut() {
                *last ^= 1;
            }
        }
    }
    Ok(())
}

/// The shapes of table that stress readers and the scan pager.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    /// A few ids in a huge capacity.
    Sparse,
    /// Every slot, or nearly, holds an id.
    Dense,
    /// Most slots that held an id hold a tombstone.
    Tombstones,
    /// Ids that all start probing at the same slot: the longest probe sequences
    /// the table allows.
    Colliding,
}

/// A degenerate but valid table (one the builder makes) of `shape`, from the fuzz
/// input.
pub fn degenerate_table(u: &mut Unstructured<'_>, shape: Shape) -> Result<Vec<u8>> {
    let build = |b: Builder, ids: &[u64]| {
        b.try_build(ids)
            .map_err(|_| arbitrary::Error::IncorrectFormat)
    };
    match shape {
        Shape::Sparse => {
            let ids = ids(u, 16)?;
            let reserve = *u.choose(&[1_000, 20_000, 300_000])?;
            build(builder(u, 0)?.reserve(reserve), &ids)
        }
        Shape::Dense => {
            let n = u.int_in_range(1..=2_000)?;
            let base: u64 = u.arbitrary()?;
            let ids: Vec<u64> = (0..n).map(|i| base.wrapping_add(i)).collect();
            build(builder(u, 0)?.max_load(1.0), &ids)
        }
        Shape::Tombstones => {
            let n = u.int_in_range(1..=2_000)?;
            let base: u64 = u.arbitrary()?;
            let ids: Vec<u64> = (0..n).map(|i| base.wrapping_mul(i | 1)).collect();
            let mut bytes = build(builder(u, 0)?, &ids)?;
            let mut table = TableMut::open(&mut bytes).expect("built tables open");
            let keep = u.int_in_range(0..=8u64)?;
            for (i, &id) in ids.iter().enumerate() {
                if i as u64 % 9 >= keep {
                    table.remove(id);
                }
            }
            Ok(bytes)
        }
        Shape::Colliding => {
            let n = u.int_in_range(2..=64u64)?;
            let b = builder(u, 0)?.max_load(*u.choose(&[0.75, 1.0])?);
            let seed = idset::Header::parse(&build(b, &[1])?)
                .map(|h| h.seed)
                .unwrap_or(idset::DEFAULT_SEED);
            let cap = b
                .capacity_for(n)
                .map_err(|_| arbitrary::Error::IncorrectFormat)?;
            let start = |id: u64| start_and_step(hash(id, seed), cap).0;
            let target = start(u.int_in_range(1..=1000)?);
            // About `cap` tries per id: a few hundred thousand hashes at most.
            let ids: Vec<u64> = (1..)
                .filter(|&id| start(id) == target)
                .take(n as usize)
                .collect();
            build(b, &ids)
        }
    }
}

/// Redis's glob over the digits of an id, for the few pattern forms the targets
/// use: `*`, `?` and literal bytes.
pub fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && glob(rest, &text[1..]),
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}

/// A map from key to value, as the server should hold it.
pub type Model = BTreeMap<Vec<u8>, Value>;
