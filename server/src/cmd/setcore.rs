//! The set layer under both set families: what the S* commands (`sets.rs`) and the
//! IDSET.* commands (`idset.rs`) do alike, written once.
//!
//! The families parse their own arguments and differ in their replies and in a few
//! rules — IDSET keeps an emptied set and answers nil for a missing key, the S*
//! commands delete an emptied key and read a missing one as empty — but they store
//! the same values, so they share:
//! - the writes: adding ids (growing a table outside the shard lock where it can),
//!   creating a set, and applying a change, sequenced or not, which drops a set that
//!   a late sequenced change reached ([`add`], [`insert`], [`create`], [`apply`]);
//! - the scan: options, the pager over slot positions, and the reply ([`ScanOpts`],
//!   [`scan_page`], [`scan_reply`]);
//! - a batch check's 0/1 answers, from the lookups' masks ([`mask_flags`]).
//!
//! The stored value itself (a table, its growth, its sequence number) is
//! [`IdSet`], in storage; what is here needs the command context: the view and its
//! locks, the offload of big rebuilds, the server's counters. A family never calls
//! the other; both call this.

use relcache_protocol::idset::{TableRef, MASK_IDS};
use relcache_protocol::resp::Frame;

use super::ids::{id_frame, member_frames};
use super::{eq_ic, parse_i64, Ctx};
use crate::db::{Change, Free, IdSet, Order, Value, View};
use crate::error::CmdError;
use crate::offload::{offload, LARGE_TABLE};
use crate::stats::Counter;

/// An add of more ids than this that may create its key builds the new table
/// before taking the lock (see [`add`]).
const SPECULATIVE_BUILD_MIN: usize = 64;

// ---- Batch membership. ----

/// The 0/1 answers of `n` membership checks, from the masks of
/// [`TableRef::contains_masks`] (bit i of a mask answers for its i-th id, a mask
/// answering for up to [`MASK_IDS`] ids, the last for the rest of `n`): written
/// from each mask in turn, a shift and a store an answer, not a call for each.
pub(super) fn mask_flags(masks: impl IntoIterator<Item = u64>, n: usize) -> Vec<i64> {
    let mut out = Vec::with_capacity(n);
    for mask in masks {
        let k = (n - out.len()).min(MASK_IDS);
        out.extend((0..k).map(|i| ((mask >> i) & 1) as i64));
    }
    debug_assert_eq!(out.len(), n, "a mask for every {MASK_IDS} answers");
    out
}

// ---- Writes. ----

/// Adds `ids` to the set at `key`, creating the key unless `only_if_present`.
/// Returns how many ids were new, or `None` when the key is absent and
/// `only_if_present` (nothing is created). Call it after parsing every argument and
/// before taking the view: it takes the view itself, and may release and retake it.
///
/// With `seq`, the adds are change `seq` of the set's source of truth, applied only
/// in order (see [`Order`]): a change already applied adds nothing, and one that
/// arrived after a later change drops the key, which is then answered as absent.
///
/// The expensive parts run without the shard lock where they can:
/// - a batch of more than [`SPECULATIVE_BUILD_MIN`] ids that may create the key is
///   built into a table before locking (wasted if the key turns out to exist, which
///   is rare for big batches: they are cache fills);
/// - when the new ids may not fit in the table in place, the table is rebuilt larger
///   from a snapshot with the lock released, then swapped in if the key still holds
///   that very table; if someone changed it meanwhile, the insert grows the current
///   table under the lock instead, as it would have anyway.
///
/// Inside EXEC the transaction's locks cannot be released and everything happens
/// under them. A call that adds nothing does not touch the key, so a WATCH of it
/// does not fire (as in Redis, where SADD of existing members modifies nothing) —
/// unless it is a sequenced change, which moves the set's sequence number on.
///
/// # Errors
///
/// `WRONGTYPE` if the key holds a string.
pub(super) fn add(
    ctx: &mut Ctx<'_, '_>,
    key: &[u8],
    ids: &[u64],
    only_if_present: bool,
    seq: Option<u64>,
) -> Result<Option<Added>, CmdError> {
    let mut fresh =
        (!only_if_present && ids.len() > SPECULATIVE_BUILD_MIN).then(|| IdSet::build(ids));
    let may_release = !ctx.in_exec();
    let late = &ctx.server.stats.idset_late_changes;
    let v = ctx.view();
    let grow = match v.peek(key) {
        None if only_if_present => return Ok(None),
        None => {
            let set = fresh.take().unwrap_or_else(|| IdSet::build(ids));
            let n = create(v, key, set.with_seq(seq.unwrap_or(0))).0;
            return Ok(Some(Added::changed(n, true)));
        }
        Some(e) => {
            let set = e.value().as_idset()?;
            let table = set.table(); // the header is read once, not per id
            match ids.iter().position(|&id| !table.contains(id)) {
                // Out-of-order and repeated changes, and in-order ones that add
                // nothing, are settled under the lock below.
                _ if seq.is_some_and(|s| set.order(s) != Order::Next) => None,
                None if seq.is_none() => return Ok(Some(Added::NOTHING)),
                None => None,
                Some(first_new) => {
                    let new = &ids[first_new..];
                    // `may_need_rebuild` assumes every id is new: count the ones that
                    // really are before deciding, so re-adding members never grows a
                    // table.
                    if may_release && set.may_need_rebuild(new.len()) {
                        let incoming = new.iter().filter(|&&id| !table.contains(id)).count();
                        set.may_need_rebuild(incoming)
                            .then(|| (set.clone(), incoming))
                    } else {
                        None
                    }
                }
            }
        }
    };
    drop(fresh);
    let sequenced = seq.map(|s| (s, late));
    let Some((snapshot, incoming)) = grow else {
        return insert(v, key, ids, only_if_present, sequenced);
    };
    ctx.release_view();
    let bigger = if snapshot.heap_size() > LARGE_TABLE {
        offload(|| snapshot.plan_rebuild(incoming))
    } else {
        snapshot.plan_rebuild(incoming)
    };
    let v = ctx.view();
    if let Some(e) = v.get_mut(key) {
        if let Value::IdSet(set) = e.value_mut() {
            // Holding `snapshot` pins the old buffer, so any change to the key since
            // went to a copy and shows as a different buffer here.
            if set.is_same(snapshot.bytes()) {
                set.replace(bigger);
            }
        }
    }
    // The old table, if nothing else holds it now: not freed under the lock.
    v.free(Value::IdSet(snapshot), Free::Later);
    insert(v, key, ids, only_if_present, sequenced)
}

/// Adds `ids` under the lock: into the set at `key`, or a new set unless
/// `only_if_present`. A sequenced change, `(seq, late)`, is applied only in order
/// (see [`apply`]). Returns what it did, or `None` when there was no set and
/// none was to be created.
pub(super) fn insert(
    v: &mut View<'_>,
    key: &[u8],
    ids: &[u64],
    only_if_present: bool,
    sequenced: Option<(u64, &Counter)>,
) -> Result<Option<Added>, CmdError> {
    match apply(v, key, Change::Add(ids), sequenced)? {
        Applied::Changed(n) => Ok(Some(Added::changed(n, false))),
        Applied::Missing if !only_if_present => {
            let seq = sequenced.map_or(0, |(s, _)| s);
            let n = create(v, key, IdSet::build(ids).with_seq(seq)).0;
            Ok(Some(Added::changed(n, true)))
        }
        Applied::DroppedLate => Ok(Some(Added {
            dropped: true,
            ..Added::NOTHING
        })),
        Applied::Missing => Ok(None),
    }
}

/// What [`add`] or [`insert`] did to a set that was there or is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Added {
    /// Ids that were not members before.
    pub n: u64,
    /// Whether the key was created (keyspace notifications' `new`).
    pub created: bool,
    /// A numbered change that came out of order: the set is gone.
    pub dropped: bool,
}

impl Added {
    pub const NOTHING: Added = Added {
        n: 0,
        created: false,
        dropped: false,
    };

    fn changed(n: u64, created: bool) -> Added {
        Added {
            n,
            created,
            dropped: false,
        }
    }
}

/// What [`apply`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applied {
    /// No key: nothing changed.
    Missing,
    /// Applied: this many ids added or removed.
    Changed(u64),
    /// A sequenced change that came out of order: the set can no longer be trusted
    /// and the key is gone (answered as absent until the next load).
    DroppedLate,
}

/// Applies `change` to the set at `key`, as is: an emptied set stays (the S*
/// commands that delete emptied keys do so themselves). A sequenced change,
/// `(seq, late)`, is applied only in order (see [`IdSet::apply`]); a set it reached
/// out of order is dropped here, the one place that happens, and counted in `late`.
///
/// # Errors
///
/// `WRONGTYPE` if the key holds a string.
pub(super) fn apply(
    v: &mut View<'_>,
    key: &[u8],
    change: Change<'_>,
    sequenced: Option<(u64, &Counter)>,
) -> Result<Applied, CmdError> {
    let Some(e) = v.get_mut(key) else {
        return Ok(Applied::Missing);
    };
    let seq = sequenced.map(|(s, _)| s);
    match e.value_mut().as_idset_mut()?.apply(change, seq) {
        Some(n) => Ok(Applied::Changed(n)),
        None => {
            let (_, late) = sequenced.expect("only a sequenced change is refused");
            v.delete(key, Free::Now);
            late.incr();
            Ok(Applied::DroppedLate)
        }
    }
}

/// Stores `set` as a new value at `key` (replacing whatever was there, without an
/// expiry) and returns its size and whether the key is new.
pub(super) fn create(v: &mut View<'_>, key: &[u8], set: IdSet) -> (u64, bool) {
    let n = set.len();
    let created = !v.insert(key, Value::IdSet(set), 0);
    (n, created)
}

// ---- Scans: SSCAN and IDSET.SCAN. ----
//
// The cursor is a slot position in the table; the two ids kept as header flags (0
// and `u64::MAX`) come with the first page. Slots never move while a table lives,
// so a full iteration returns every member present throughout exactly once — unless
// the table is rebuilt (grown or shrunk) mid-scan, when members may repeat, as Redis
// allows. A cursor at or past the capacity — one the server never issued, such as
// `-1` (`u64::MAX`) — reads no slot and ends the scan with cursor 0.

/// SSCAN reads at most this many slots per member asked for (COUNT), so a sparse
/// table cannot turn one call into a full scan (Redis bounds empty buckets alike).
const SCAN_SLOTS_PER_COUNT: u64 = 10;

/// The options after a scan's cursor: `[MATCH pattern] [COUNT count]` (MATCH only
/// where the command has it).
pub(super) struct ScanOpts<'a> {
    pub count: u64,
    /// `None` for no MATCH or `MATCH *`.
    pub pattern: Option<&'a [u8]>,
}

impl<'a> ScanOpts<'a> {
    /// Parses the options, as Redis does: each once or more (the last wins), COUNT
    /// at least 1.
    pub(super) fn parse(opts: &[&'a [u8]], with_match: bool) -> Result<ScanOpts<'a>, CmdError> {
        let mut out = ScanOpts {
            count: 10,
            pattern: None,
        };
        let mut i = 0;
        while i < opts.len() {
            let value = opts.get(i + 1).ok_or(CmdError::Syntax)?;
            if eq_ic(opts[i], "COUNT") {
                out.count = u64::try_from(parse_i64(value)?)
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or(CmdError::Syntax)?;
            } else if with_match && eq_ic(opts[i], "MATCH") {
                out.pattern = (&value[..] != b"*").then_some(&value[..]);
            } else {
                return Err(CmdError::Syntax);
            }
            i += 2;
        }
        Ok(out)
    }
}

/// How much one page of a scan may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PageLimit {
    /// Stop once this many members are on the page (after at least one slot).
    members: u64,
    /// Read at most this many slots.
    slots: u64,
}

impl PageLimit {
    /// SSCAN's COUNT: about `count` members, reading at most
    /// `count * SCAN_SLOTS_PER_COUNT` slots.
    pub(super) fn members(count: u64) -> PageLimit {
        PageLimit {
            members: count,
            slots: count.saturating_mul(SCAN_SLOTS_PER_COUNT),
        }
    }

    /// IDSET.SCAN's COUNT: exactly `count` slots, whatever they hold.
    pub(super) fn slots(count: u64) -> PageLimit {
        PageLimit {
            members: u64::MAX,
            slots: count,
        }
    }
}

/// How many slots a walk of `table`'s members reads: every one, however few
/// are full (a table loaded with `RESERVE` may have millions for one id).
pub(super) fn walked(table: &TableRef<'_>) -> u64 {
    table.len().max(u64::from(table.capacity()))
}

/// The members in the slots from `cursor` on (plus the flag ids on the first page)
/// within `limit`, reading at least one slot so every call moves on; and the next
/// cursor, 0 at the end.
pub(super) fn scan_page(table: &TableRef<'_>, cursor: u64, limit: PageLimit) -> (u64, Vec<u64>) {
    // A COUNT of millions reads the whole table in one call.
    crate::offload::step_aside_past(limit.slots.min(u64::from(table.capacity())));
    let mut ids = Vec::new();
    if cursor == 0 {
        ids.extend([0, u64::MAX].into_iter().filter(|&id| table.contains(id)));
    }
    let mut read = 0u64;
    for slot in table.slots(cursor) {
        if read >= limit.slots || (read > 0 && ids.len() as u64 >= limit.members) {
            break;
        }
        ids.extend(slot);
        read += 1;
    }
    // `read` slots from `cursor`, which is below the capacity if any was read.
    let next = cursor.saturating_add(read);
    (
        if next >= u64::from(table.capacity()) {
            0
        } else {
            next
        },
        ids,
    )
}

/// A scan's reply: `[next cursor, members]`.
pub(super) fn scan_reply(next: u64, ids: Vec<u64>) -> Frame {
    let n = ids.len();
    Frame::Array(vec![
        id_frame(next),
        Frame::Array(member_frames(ids.into_iter(), n)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use relcache_protocol::idset::Builder;

    fn collect_scan(table: &TableRef<'_>, limit: PageLimit) -> Vec<u64> {
        let (mut cursor, mut seen) = (0u64, Vec::new());
        loop {
            let (next, page) = scan_page(table, cursor, limit);
            assert!(
                page.len() as u64 <= limit.members.max(1).saturating_add(2),
                "a page holds at most COUNT members (flags aside)"
            );
            seen.extend(page);
            if next == 0 {
                return seen;
            }
            assert!(next > cursor, "the cursor moves forward");
            cursor = next;
        }
    }

    #[test]
    fn a_full_scan_returns_every_member_once() {
        let ids: Vec<u64> = (1..=1000).chain([0, u64::MAX]).collect();
        let bytes = Builder::new().build(&ids);
        let t = TableRef::open(&bytes).unwrap();
        let mut want = ids.clone();
        want.sort_unstable();
        for count in [1, 7, 10, 37, 100, 5000] {
            for limit in [PageLimit::members(count), PageLimit::slots(count)] {
                let mut seen = collect_scan(&t, limit);
                seen.sort_unstable();
                assert_eq!(seen, want, "{limit:?}");
            }
        }
    }

    #[test]
    fn a_slot_page_reads_exactly_count_slots() {
        let ids: Vec<u64> = (1..=100).collect();
        let bytes = Builder::new().build(&ids);
        let t = TableRef::open(&bytes).unwrap();
        let cap = u64::from(t.capacity());
        let (next, page) = scan_page(&t, 5, PageLimit::slots(20));
        assert_eq!(next, 25);
        let want: Vec<u64> = (5..25).filter_map(|i| t.slot(i)).collect();
        assert_eq!(page, want);
        assert_eq!(scan_page(&t, cap - 3, PageLimit::slots(20)).0, 0, "ends");
    }

    #[test]
    fn an_invented_cursor_past_the_table_ends_the_scan() {
        let bytes = Builder::new().build(&[0, 1, 2, u64::MAX]);
        let t = TableRef::open(&bytes).unwrap();
        let cap = u64::from(t.capacity());
        for cursor in [cap, cap + 1, 1 << 63, u64::MAX - 1, u64::MAX] {
            for limit in [PageLimit::members(10), PageLimit::slots(u64::MAX)] {
                assert_eq!(scan_page(&t, cursor, limit), (0, vec![]), "{cursor}");
            }
        }
    }
}
