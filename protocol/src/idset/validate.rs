//! Checking untrusted bytes: [`validate`] accepts exactly the byte strings that are
//! well-formed tables, in time linear in their length, and explains any refusal in a
//! sentence a client can be shown ([`FormatError`]'s `Display`).

use super::prime::is_prime;
use super::table::{read_slot, Probe, TableMut, TableRef, Words};
use super::{
    probe_limit, DELETED, EMPTY, HEADER_LEN, MAGIC, MAX_CAPACITY, MAX_PROBE, MIN_CAPACITY,
};

/// Why bytes are not a valid table. The `Display` text is meant for clients.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The input does not start with [`MAGIC`].
    #[error("bad magic: an idset table starts with the bytes 89 52 43 49 44 53")]
    BadMagic,
    /// Shorter than the header.
    #[error("table is {len} bytes, shorter than the 32-byte header")]
    TooShort {
        /// Input length.
        len: usize,
    },
    /// A version this code does not read.
    #[error("unsupported table version {version} (this server reads version 1)")]
    UnsupportedVersion {
        /// The version byte.
        version: u8,
    },
    /// Flag bits other than [`FLAGS_KNOWN`](super::FLAGS_KNOWN) are set.
    #[error("unknown flag bits set (flags byte 0x{flags:02x}, only 0x03 is defined)")]
    UnknownFlags {
        /// The flags byte.
        flags: u8,
    },
    /// The reserved header field is not zero.
    #[error("reserved header field is {reserved}, must be 0")]
    ReservedNotZero {
        /// The reserved field.
        reserved: u32,
    },
    /// Capacity below [`MIN_CAPACITY`] or above [`MAX_CAPACITY`].
    #[error("capacity {capacity} is out of range ({MIN_CAPACITY} to {MAX_CAPACITY})")]
    CapacityOutOfRange {
        /// The capacity field.
        capacity: u32,
    },
    /// The input length is not `32 + 8 * capacity`.
    #[error("table length {len} does not match capacity {capacity} (expected {expected} bytes)")]
    LengthMismatch {
        /// Input length.
        len: usize,
        /// The capacity field.
        capacity: u32,
        /// `32 + 8 * capacity`.
        expected: u64,
    },
    /// The capacity is not prime.
    #[error("capacity {capacity} is not prime")]
    CapacityNotPrime {
        /// The capacity field.
        capacity: u32,
    },
    /// The header's count differs from the number of ids in the slots.
    #[error("header count {header} but {actual} ids in slots")]
    CountMismatch {
        /// The count field.
        header: u32,
        /// Slots that hold an id.
        actual: u64,
    },
    /// The header's deleted count differs from the number of deleted slots.
    #[error("header deleted count {header} but {actual} deleted slots")]
    DeletedMismatch {
        /// The deleted field.
        header: u32,
        /// Slots equal to [`DELETED`].
        actual: u64,
    },
    /// No slot is [`EMPTY`] (lookups for absent ids must end somewhere).
    #[error("no empty slot: a table must keep at least one")]
    NoEmptySlot,
    /// A lookup for the id reaches an empty slot before the slot the id is in.
    #[error("id {id} at slot {slot} is not reachable from its probe sequence")]
    Unreachable {
        /// The id.
        id: u64,
        /// The slot it is in.
        slot: u32,
    },
    /// The id is stored in two slots.
    #[error("id {id} appears twice (slots {first} and {second})")]
    Duplicate {
        /// The id.
        id: u64,
        /// The slot a lookup finds it in.
        first: u32,
        /// The other slot.
        second: u32,
    },
    /// A lookup for the id reads [`MAX_PROBE`] slots, meeting neither it nor an empty
    /// slot: the id sits past the longest lookup the format allows.
    #[error(
        "id {id} at slot {slot} is not within the first {MAX_PROBE} slots of its probe \
         sequence; rebuild the table with a lower load or another seed"
    )]
    PastProbeBound {
        /// The id.
        id: u64,
        /// The slot it is in.
        slot: u32,
    },
}

/// Whether `bytes` starts with the table magic: the cheap test of whether a value is
/// meant as a table (it may still be an invalid one).
#[must_use]
pub fn looks_like_table(bytes: &[u8]) -> bool {
    bytes.starts_with(&MAGIC)
}

/// How much of a table a check proves. The structure (rules 1–11 of FORMAT.md §8:
/// header, prime capacity, counts, an empty slot) is always checked in full; the
/// levels differ in how many ids' placement (rule 12) they prove.
///
/// Structure alone makes every method of [`TableRef`] and [`TableMut`] safe and
/// bounded: every lookup, insert and remove reads at most [`probe_limit`] slots,
/// every slot index is reduced modulo the capacity the length was checked against,
/// and the header's count is the number of ids in the slots, so nothing loops, reads
/// out of bounds or panics, and iteration yields `len` ids. What placement adds is
/// that the table behaves as a set: every stored id is found by lookup and none is
/// stored twice. Code that holds a table checked below [`Check::Full`] must not rely
/// on that: iteration may yield an id twice or one that lookup does not find (so,
/// say, drawing random members until `n` distinct ones come may never end). A table
/// that breaks rule 12 is a builder's bug, and its answers are as laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Check {
    /// The structure only: for bytes that passed a check before and were kept whole
    /// (a snapshot or dump the server wrote, under its checksum). O(capacity),
    /// sequential and branch-free: about a third of a nanosecond a slot.
    Structure,
    /// The structure, and the placement of the ids in evenly spaced slots, every
    /// `max(1, capacity / SAMPLE_SLOTS)`-th from slot 0 ([`SAMPLE_SLOTS`] to twice
    /// that many), in slot order: catches a builder whose hash, step or
    /// probe rule is wrong (any such bug misplaces a large share of the ids) for a few
    /// microseconds, whatever the table's size. The same bytes always get the same
    /// verdict.
    Sample,
    /// The structure and every id's placement: exactly the tables FORMAT.md §8 calls
    /// valid. About 13 ns per id, most of it walking the probe sequences of ids that
    /// are not in their first slot.
    Full,
}

/// How many slots [`Check::Sample`] proves the placement of, at least (up to twice
/// as many; every slot of a table under twice this size).
pub const SAMPLE_SLOTS: u32 = 256;

/// Checks that `bytes` is a valid table and returns a view of it: [`check`] with
/// [`Check::Full`].
///
/// Checks, in order: the header ([`Header::parse`](super::Header::parse): magic,
/// version, flag bits, reserved field, capacity range, length), that the capacity is
/// prime, that the header's count and deleted count match the slots, that at least one
/// slot is empty, and that a lookup of every stored id, which reads at most
/// [`MAX_PROBE`] slots, ends at the id's own slot (which proves it reachable within
/// the bound and rules out duplicates).
///
/// Runs in O(capacity) time on any input (at most `MAX_PROBE` reads per stored id),
/// allocates nothing, and never panics. The constant matters for a table laid out
/// with every id at the bound: measured on an 80 MB table (10M slots, 6.3M ids each
/// 128 slots into its sequence), 15 s, against 0.55 s for a built table of 7.5M ids
/// in the same capacity. (The total budget this replaced, 64 reads per slot of
/// capacity, allowed about 12 s there.)
///
/// # Errors
///
/// The first [`FormatError`] found.
pub fn validate(bytes: &[u8]) -> Result<TableRef<'_>, FormatError> {
    check(bytes, Check::Full)
}

/// Checks `bytes` as deeply as `how` says and returns a view of them. Whatever the
/// level, the view is safe to use (see [`Check`]); only [`Check::Full`] proves that
/// its answers are a set's.
///
/// # Errors
///
/// The first [`FormatError`] found: a structural one first, then the first misplaced
/// id in slot order among those the level looks at.
pub fn check(bytes: &[u8], how: Check) -> Result<TableRef<'_>, FormatError> {
    let table = TableRef::open(bytes)?;
    let cap = table.capacity();
    if !is_prime(cap) {
        return Err(FormatError::CapacityNotPrime { capacity: cap });
    }

    let (empty, deleted) = count_markers(&bytes[HEADER_LEN..]);
    let live = u64::from(cap) - empty - deleted;
    if live != u64::from(table.count()) {
        return Err(FormatError::CountMismatch {
            header: table.count(),
            actual: live,
        });
    }
    if deleted != u64::from(table.deleted()) {
        return Err(FormatError::DeletedMismatch {
            header: table.deleted(),
            actual: deleted,
        });
    }
    if empty == 0 {
        return Err(FormatError::NoEmptySlot);
    }

    let stride = match how {
        Check::Structure => return Ok(table),
        Check::Sample => (cap / SAMPLE_SLOTS).max(1),
        Check::Full => 1,
    };
    let seed = table.seed();
    for i in (0..u64::from(cap)).step_by(stride as usize) {
        let id = read_slot(bytes, i);
        if id != EMPTY && id != DELETED {
            check_placement(bytes, cap, seed, i, id)?;
        }
    }
    Ok(table)
}

/// How many of `slots` are [`EMPTY`] and how many [`DELETED`]: the one pass over
/// every slot that every check makes, so the bulk of a prebuilt table's check.
fn count_markers(slots: &[u8]) -> (u64, u64) {
    // The baseline x86-64 target has no 64-bit vector compare (SSE4.1's), so the
    // portable loop compiles to scalar code, about 6 instructions a slot; with
    // AVX2 it is four slots in a few instructions, ~5× faster on a 213 KB table.
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { count_markers_avx2(slots) };
    }
    count_markers_portable(slots)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn count_markers_avx2(slots: &[u8]) -> (u64, u64) {
    count_markers_portable(slots)
}

/// Branch-free (whether a slot is empty is a coin toss at typical loads), one
/// comparison per marker, which the compiler vectorizes.
#[inline(always)]
fn count_markers_portable(slots: &[u8]) -> (u64, u64) {
    let (mut empty, mut deleted) = (0u64, 0u64);
    for v in Words::new(slots) {
        empty += u64::from(v == EMPTY);
        deleted += u64::from(v == DELETED);
    }
    (empty, deleted)
}

/// That a lookup of `id`, which is in slot `i`, ends there: rule 12 for one id.
#[inline]
fn check_placement(bytes: &[u8], cap: u32, seed: u64, i: u64, id: u64) -> Result<(), FormatError> {
    let mut probe = Probe::new(id, seed, cap);
    // Most ids sit at the start of their sequence: then the lookup's one read
    // would be slot `i` itself, which the caller just read, so skip the random access.
    if probe.slot() == i {
        return Ok(());
    }
    let slot = i as u32;
    // Below MAX_PROBE slots the walk covers the whole sequence, which for a prime
    // capacity is every slot, so only a larger table can end it unresolved.
    for _ in 0..probe_limit(cap) {
        let v = read_slot(bytes, probe.slot());
        if v == id {
            return if probe.slot() == i {
                Ok(())
            } else {
                Err(FormatError::Duplicate {
                    id,
                    first: probe.slot() as u32,
                    second: slot,
                })
            };
        }
        if v == EMPTY {
            return Err(FormatError::Unreachable { id, slot });
        }
        probe.advance();
    }
    Err(FormatError::PastProbeBound { id, slot })
}

/// [`validate`], then a [`TableMut`] over the same bytes.
///
/// # Errors
///
/// The first [`FormatError`] found.
pub fn validate_mut(bytes: &mut [u8]) -> Result<TableMut<'_>, FormatError> {
    validate(bytes)?;
    TableMut::open(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector path (taken on any CPU with AVX2, so on CI) and the portable one
    /// count the same, for every length around the vector width and every mix.
    #[test]
    fn marker_counts_agree_with_a_plain_count() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for len in 0..200usize {
            let words: Vec<u64> = (0..len)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    match state >> 62 {
                        0 => EMPTY,
                        1 => DELETED,
                        _ => state | 1,
                    }
                })
                .collect();
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let expected = (
                words.iter().filter(|&&w| w == EMPTY).count() as u64,
                words.iter().filter(|&&w| w == DELETED).count() as u64,
            );
            assert_eq!(count_markers(&bytes), expected, "{len} slots");
            assert_eq!(count_markers_portable(&bytes), expected, "{len} slots");
        }
    }
}
