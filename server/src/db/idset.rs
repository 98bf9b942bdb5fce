//! The stored form of an idset: one checked table, updated in place.
//!
//! The bytes are exactly what a client wrote with SET (or what IDSET.LOAD / SADD
//! built), so GET hands them back without conversion and a client can check
//! membership locally. They are kept as `Bytes` so a GET can reply with a reference
//! count instead of a copy; an update takes the buffer back as mutable when no reply
//! still holds it (the common case) and copies it only when one does.
//!
//! Growth: when an insert finds the table full (the format's in-place limit, or,
//! rarely, an id whose free slot lies past the probe bound), the table is rebuilt
//! with that id and room for the rest of the batch plus its current size, so a long
//! run of adds costs amortized O(1) each. Callers that must not hold a
//! shard lock during a rebuild use [`IdSet::plan_rebuild`] first (see `add` in
//! `cmd/setcore.rs`, the write path both set families share).
//!
//! Sets from clients come in through [`IdSet::from_client`] (a table, checked here)
//! and [`IdSet::with_reserve`] (ids); what they can refuse is a
//! [`db::Error`](super::Error). A client's table is checked in its structure and, by
//! default, in a sample of its ids' placement ([`Check`]): enough that no lookup or
//! update reads out of bounds or runs long. A table with misplaced ids outside the
//! sample (a builder's bug) answers as laid out, so code here and in the commands
//! never assumes that an id iterated is found or that `len` ids are distinct; the
//! first rebuild (growth, shrink, [`IdSet::remove_members`]) places every id again,
//! collapsing duplicates.

use bytes::{Bytes, BytesMut};
use relcache_protocol::idset::{check, rebuild, rebuild_with, Builder, Check, TableMut, TableRef};

use super::Error;
use crate::stats::Gauge;

/// A table shrinks when fewer than 1/SHRINK_RATIO of its slots hold members.
const SHRINK_RATIO: u64 = 8;
/// Tables this small are never shrunk: it would save little and churn a lot.
const SHRINK_MIN_CAPACITY: u32 = 1024;

/// An idset value: a table known to be valid, and the sequence number of the
/// newest change from the source of truth it reflects (see [`IdSet::order`]).
#[derive(Debug)]
pub struct IdSet {
    table: Bytes,
    /// 0 for a set that no sequenced load or change has touched.
    seq: u64,
}

/// Where a sequenced change (`IDSET.ADD … SEQ n`, `IDSET.REM … SEQ n`) stands
/// against the set it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Newer than anything the set reflects: apply it, and the set is then as of it.
    Next,
    /// The very change the set is as of (a retried write-through): nothing to do.
    Applied,
    /// Older than what the set reflects: it arrived after a later change, or after
    /// a load that may or may not have included it. Applying it could undo a later
    /// change to the same id and skipping it could lose it, so the set can no longer
    /// be trusted.
    Late,
}

/// A change of a set's members, for [`IdSet::apply`].
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    Add(&'a [u64]),
    Remove(&'a [u64]),
}

/// Totals over every idset value alive, for INFO's idsets section: kept as the
/// values change (each in-place update adjusts them by its delta), so reading them
/// costs nothing and takes no lock.
pub struct Totals {
    pub tables: Gauge,
    /// Ids held, the two flag ids included.
    pub ids: Gauge,
    /// Slots of all tables (the denominator of the average load factor).
    pub slots: Gauge,
    /// Ids in slots and deleted slots: what fills a table's capacity.
    pub used_slots: Gauge,
    pub bytes: Gauge,
}

/// The process-wide idset totals.
pub static TOTALS: Totals = Totals {
    tables: Gauge::new(),
    ids: Gauge::new(),
    slots: Gauge::new(),
    used_slots: Gauge::new(),
    bytes: Gauge::new(),
};

/// (ids, slots, used slots, bytes) of one table.
type Footprint = [i64; 4];

impl IdSet {
    fn footprint(&self) -> Footprint {
        // Tolerant: a value taken apart mid-update (an empty buffer) counts as nothing.
        let Ok(t) = TableRef::open(&self.table) else {
            return [0; 4];
        };
        [
            t.len() as i64,
            i64::from(t.capacity()),
            i64::from(t.count()) + i64::from(t.deleted()),
            self.table.len() as i64,
        ]
    }

    fn account(&self, sign: i64, before: Option<Footprint>) {
        let now = self.footprint();
        let before = before.unwrap_or([0; 4]);
        let t = &TOTALS;
        for (g, (n, b)) in [&t.ids, &t.slots, &t.used_slots, &t.bytes]
            .into_iter()
            .zip(now.iter().zip(before))
        {
            g.add(sign * (n - b));
        }
    }

    fn counted(table: Bytes) -> IdSet {
        let s = IdSet { table, seq: 0 };
        TOTALS.tables.add(1);
        s.account(1, None);
        s
    }
}

impl Clone for IdSet {
    fn clone(&self) -> IdSet {
        IdSet::counted(self.table.clone()).with_seq(self.seq)
    }
}

impl Drop for IdSet {
    fn drop(&mut self) {
        TOTALS.tables.add(-1);
        self.account(-1, None);
    }
}

impl IdSet {
    /// Wraps bytes that [`relcache_protocol::idset::check`] accepted at some level
    /// (or that a builder produced).
    pub fn from_valid(table: Bytes) -> IdSet {
        debug_assert!(TableRef::open(&table).is_ok());
        IdSet::counted(table)
    }

    /// A new set of `ids`.
    pub fn build(ids: &[u64]) -> IdSet {
        IdSet::counted(Builder::new().build(ids).into())
    }

    /// A set from a table a client sent (`SET`, `IDSET.LOAD … TABLE`, a `RESTORE`d
    /// string), checked as deeply as `how` says (`idset-table-check`) and kept as
    /// it is: `table` must be bytes a stored value may hold, not a slice that pins
    /// a larger buffer ([`crate::cmd::stored`] makes them from an argument). Call
    /// it before taking a lock — the check is O(capacity).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidTable`], saying what is wrong with the bytes.
    pub fn from_client(table: Bytes, how: Check) -> Result<IdSet, Error> {
        check(&table, how)?;
        Ok(IdSet::from_valid(table))
    }

    /// A new set of `ids` with room for `reserve` more ids to be added in place.
    ///
    /// # Errors
    ///
    /// [`Error::TooLarge`] past the format's largest table.
    pub fn with_reserve(ids: &[u64], reserve: usize) -> Result<IdSet, Error> {
        let table = Builder::new().reserve(reserve).try_build(ids)?;
        Ok(IdSet::from_valid(table.into()))
    }

    /// This set, rebuilt if needed so that `reserve` more ids fit in place.
    pub fn reserved(self, reserve: usize) -> IdSet {
        if reserve > self.table().room_in_place() as usize {
            return IdSet::from_valid(self.plan_rebuild(reserve)).with_seq(self.seq);
        }
        self
    }

    /// The table, for reads.
    pub fn table(&self) -> TableRef<'_> {
        TableRef::open(&self.table).expect("stored tables are valid")
    }

    /// The same set, as of change `seq` of its source of truth.
    pub fn with_seq(mut self, seq: u64) -> IdSet {
        self.seq = seq;
        self
    }

    /// The newest sequenced change (or load) this set reflects; 0 if none.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Where change `seq` stands against this set: changes must arrive in the
    /// order their source committed them, which the sequence numbers give.
    pub fn order(&self, seq: u64) -> Order {
        match seq.cmp(&self.seq) {
            std::cmp::Ordering::Greater => Order::Next,
            std::cmp::Ordering::Equal => Order::Applied,
            std::cmp::Ordering::Less => Order::Late,
        }
    }

    /// Applies `change`, and answers how many ids it added or removed. With `seq`,
    /// as change `seq` of the source, only in order (see [`Order`]): the very change
    /// the set is as of changes nothing; one that arrived late, or a repeated number
    /// for a change the set does not show (a counter that went back), answers
    /// `None`: the set can no longer be trusted, and the caller drops it.
    pub fn apply(&mut self, change: Change<'_>, seq: Option<u64>) -> Option<u64> {
        if let Some(seq) = seq {
            match self.order(seq) {
                Order::Next => self.seq = seq,
                Order::Applied => return self.shows(change).then_some(0),
                Order::Late => return None,
            }
        }
        Some(match change {
            Change::Add(ids) => self.insert_many(ids),
            Change::Remove(ids) => self.remove_many(ids),
        })
    }

    /// Whether the set holds what `change` leaves.
    fn shows(&self, change: Change<'_>) -> bool {
        let table = self.table();
        match change {
            Change::Add(ids) => ids.iter().all(|&id| table.contains(id)),
            Change::Remove(ids) => ids.iter().all(|&id| !table.contains(id)),
        }
    }

    /// The table bytes (what GET returns).
    pub fn bytes(&self) -> &Bytes {
        &self.table
    }

    pub fn len(&self) -> u64 {
        self.table().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, id: u64) -> bool {
        self.table().contains(id)
    }

    /// Heap bytes owned (the table), for MEMORY USAGE.
    pub fn heap_size(&self) -> usize {
        self.table.len()
    }

    /// Whether adding `incoming` ids could need a rebuild (worst case: all new).
    pub fn may_need_rebuild(&self, incoming: usize) -> bool {
        (self.table().room_in_place() as usize) < incoming
    }

    /// A rebuilt copy of this table with room for `incoming` more ids, made from a
    /// snapshot so the caller can run it without holding the shard lock.
    pub fn plan_rebuild(&self, incoming: usize) -> Bytes {
        let reserve = incoming.max(self.len() as usize);
        rebuild(&self.table(), reserve)
            .expect("table size within format limits")
            .into()
    }

    /// Whether `other` is this exact stored buffer (nobody changed the key since a
    /// snapshot was taken).
    pub fn is_same(&self, other: &Bytes) -> bool {
        self.table.as_ptr() == other.as_ptr() && self.table.len() == other.len()
    }

    /// Replaces the table with a rebuilt one (from [`plan_rebuild`](Self::plan_rebuild)).
    pub fn replace(&mut self, table: Bytes) {
        let before = self.footprint();
        self.table = table;
        self.account(1, Some(before));
    }

    /// Adds `ids`; returns how many were new.
    pub fn insert_many(&mut self, ids: &[u64]) -> u64 {
        let before = self.footprint();
        let mut added = 0;
        let mut buf = self.take_mut();
        let mut i = 0;
        while i < ids.len() {
            let mut table = TableMut::open(&mut buf).expect("stored tables are valid");
            match table.insert(ids[i]) {
                Ok(new) => {
                    added += u64::from(new);
                    i += 1;
                }
                Err(_full) => {
                    // `Full` means the id is absent. Rebuilding with it, rather than
                    // inserting into a rebuild, always makes progress: an id laid out
                    // to collide past the probe bound could be refused again.
                    let reserve = (ids.len() - i - 1).max(table.len() as usize);
                    let bigger = rebuild_with(&table.as_table(), &ids[i..=i], reserve)
                        .expect("table size within format limits");
                    release(std::mem::replace(&mut buf, BytesMut::from(&bigger[..])));
                    added += 1;
                    i += 1;
                }
            }
        }
        self.table = buf.freeze();
        self.account(1, Some(before));
        added
    }

    /// Removes `ids`; returns how many were members. Shrinks a table left mostly
    /// empty, so a set that lost most of its members gives the memory back.
    pub fn remove_many(&mut self, ids: &[u64]) -> u64 {
        let before = self.footprint();
        let removed = self.remove_inner(ids);
        self.account(1, Some(before));
        removed
    }

    /// Removes ids read out of this set (SPOP's picks), all members by construction,
    /// so that none of them is a member after. In a client's table whose placement
    /// was checked only in part, a lookup may miss one (misplaced) or find it again
    /// after removing it (stored twice): then the table is rebuilt, which places
    /// every id once, and the removal done on that. A pop loop always ends.
    /// The rebuild runs under the caller's lock, but only for such a table.
    pub fn remove_members(&mut self, ids: &[u64]) -> u64 {
        // `ids` are distinct members, so a valid table removes every one of them.
        let removed = self.remove_many(ids);
        if removed == ids.len() as u64 && !ids.iter().any(|&id| self.contains(id)) {
            return removed;
        }
        let rebuilt = self.plan_rebuild(0);
        self.replace(rebuilt);
        removed + self.remove_many(ids)
    }

    fn remove_inner(&mut self, ids: &[u64]) -> u64 {
        let mut buf = self.take_mut();
        let mut table = TableMut::open(&mut buf).expect("stored tables are valid");
        let removed = ids.iter().filter(|&&id| table.remove(id)).count() as u64;
        let t = table.as_table();
        if t.capacity() >= SHRINK_MIN_CAPACITY && t.len() * SHRINK_RATIO < u64::from(t.capacity()) {
            let smaller = rebuild(&t, 0).expect("a smaller table fits");
            self.table = smaller.into();
            release(buf);
            return removed;
        }
        self.table = buf.freeze();
        removed
    }

    /// The table as a mutable buffer: no copy if no reply still holds it.
    fn take_mut(&mut self) -> BytesMut {
        let table = std::mem::take(&mut self.table);
        table
            .try_into_mut()
            .unwrap_or_else(|shared| BytesMut::from(&shared[..]))
    }
}

/// Lets go of a table a rebuild replaced. These run under the key's shard lock
/// (in EXEC, or when a set grew past its probe bound), so a big one is freed on
/// the lazy-free thread.
fn release(old: BytesMut) {
    if old.capacity() >= super::LAZY_FREE_MIN {
        crate::offload::free_later(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn grows_and_shrinks_with_the_model() {
        let mut s = IdSet::build(&[]);
        let mut model = HashSet::new();
        let ids: Vec<u64> = (0..5000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        for chunk in ids.chunks(37) {
            let want = chunk.iter().filter(|id| model.insert(**id)).count() as u64;
            assert_eq!(s.insert_many(chunk), want);
        }
        assert_eq!(s.len(), model.len() as u64);
        let big_cap = s.table().capacity();
        let (gone, kept) = ids.split_at(4900);
        assert_eq!(s.remove_many(gone), 4900);
        assert!(
            s.table().capacity() < big_cap,
            "shrunk after most members left"
        );
        assert!(kept.iter().all(|&id| s.contains(id)));
        assert!(gone.iter().all(|&id| !s.contains(id)));
        assert!(relcache_protocol::idset::validate(s.bytes()).is_ok());
    }

    #[test]
    fn sequenced_changes_apply_in_order_only() {
        let mut s = IdSet::build(&[1, 2]).with_seq(10);
        assert_eq!(s.apply(Change::Add(&[2]), Some(10)), Some(0), "a retry");
        assert_eq!(
            s.apply(Change::Add(&[3]), Some(10)),
            None,
            "a reused number"
        );
        assert_eq!(s.apply(Change::Add(&[3]), Some(12)), Some(1));
        assert_eq!(s.apply(Change::Remove(&[1]), Some(13)), Some(1));
        assert_eq!(s.apply(Change::Remove(&[1]), Some(13)), Some(0), "a retry");
        assert_eq!(
            s.apply(Change::Remove(&[2]), Some(13)),
            None,
            "a reused number"
        );
        assert_eq!(s.apply(Change::Add(&[1]), Some(11)), None, "late");
        assert_eq!(s.apply(Change::Add(&[4]), None), Some(1), "unsequenced");
        assert_eq!(s.seq(), 13);
        assert!(s.contains(2) && s.contains(3) && s.contains(4) && !s.contains(1));
    }

    #[test]
    fn update_copies_only_when_a_reader_holds_the_buffer() {
        let mut s = IdSet::build(&(1..=100).collect::<Vec<u64>>());
        assert!(!s.may_need_rebuild(2), "room for the two adds below");
        let reply = s.bytes().clone(); // a GET reply in flight
        s.insert_many(&[1004]);
        assert!(!s.is_same(&reply), "copy on write");
        assert!(
            !TableRef::open(&reply).unwrap().contains(1004),
            "the reply is unchanged"
        );
        drop(reply);
        let before = s.bytes().as_ptr();
        s.insert_many(&[1005]);
        assert_eq!(s.bytes().as_ptr(), before, "in place when unshared");
    }
}
