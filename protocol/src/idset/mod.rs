//! The idset table: a set of `u64` ids as one byte string that clients build and the
//! server reads and updates in place.
//!
//! A table is what a relation service (in PHP, Java or Rust) writes with one `SET` to
//! cache a user's follow set. It is a public contract, specified for implementers in
//! `protocol/FORMAT.md` with test vectors; this module is the reference
//! implementation. It is not a general-purpose hash set: ids are only `u64`, the
//! capacity is fixed until the table is rebuilt, and nothing here allocates except
//! [`Builder`], [`rebuild`] and [`rebuild_with`].
//!
//! # Layout
//!
//! A 32-byte header, then `capacity` slots of 8 bytes. Every integer is little-endian.
//!
//! ```text
//!  offset  0      6     7     8                 16        20        24        28        32
//!          +------+-----+-----+-----------------+---------+---------+---------+---------+
//!          | magic| ver |flags|      seed       |capacity |  count  | deleted |reserved |
//!          |  6 B | u8  | u8  |       u64       |   u32   |   u32   |   u32   | u32 = 0 |
//!          +------+-----+-----+-----------------+---------+---------+---------+---------+
//!  offset 32 + 8*i: slot i (u64), i in 0..capacity
//!          +----------+----------+----------+-- ... --+--------------------+
//!          |  slot 0  |  slot 1  |  slot 2  |         | slot capacity - 1  |
//!          +----------+----------+----------+-- ... --+--------------------+
//! ```
//!
//! - `magic` is [`MAGIC`], `89 52 43 49 44 53` (`\x89RCIDS`). `0x89` cannot begin a
//!   UTF-8 string, so no text value is ever mistaken for a table.
//! - `ver` is [`VERSION`]; a reader refuses any other.
//! - `flags`: [`FLAG_HAS_ZERO`] says id 0 is a member, [`FLAG_HAS_MAX`] says id
//!   `u64::MAX` is a member. Those two ids are the slot markers [`EMPTY`] and
//!   [`DELETED`], so they live in the header instead of a slot, and every `u64` is
//!   storable. Other bits must be zero.
//! - `seed` is mixed into the hash (see [`hash`]).
//! - `capacity` is the number of slots: a prime in [`MIN_CAPACITY`]..=[`MAX_CAPACITY`].
//! - `count` is the number of ids in slots (not counting the flag ids), `deleted` the
//!   number of [`DELETED`] slots.
//! - `reserved` must be zero.
//!
//! Slots start at offset 32, so they are 8-byte aligned when the buffer is; reads and
//! writes are still explicit `from_le_bytes` / `to_le_bytes`, never casts.
//!
//! # Lookup
//!
//! Double hashing: `h = hash(id, seed)`, start slot and step from [`start_and_step`]
//! (step in `1..capacity`, coprime with the prime capacity, so a probe sequence visits
//! every slot once). A lookup reads slots along the sequence until it finds the id or
//! an [`EMPTY`] slot, skipping [`DELETED`] ones, and stops after [`MAX_PROBE`] reads
//! (or `capacity`, if smaller) whatever the table holds: the format requires every
//! stored id to sit within that many slots of the start of its sequence.
//!
//! # Using it
//!
//! - Build: [`Builder`] (`Builder::new().build(&ids)`).
//! - Untrusted bytes: [`validate`] returns a [`TableRef`] or a [`FormatError`] whose
//!   message can go to a client as is. [`looks_like_table`] is the cheap magic check.
//!   [`check`] proves less for less time ([`Check`]: the structure, which is what
//!   safety needs, and a sample of the ids' placement or none of it).
//! - Bytes already checked (for example stored by the server after `check`):
//!   [`TableRef::open`] / [`TableMut::open`] check only the header, in O(1).
//! - Read slot by slot (a cursor over slot positions): [`TableRef::slot`] and
//!   [`TableRef::slots`].
//! - Update in place: [`TableMut::insert`] / [`TableMut::remove`]; on [`Full`],
//!   [`rebuild_with`] the members and the new id (a rebuild always places it).
//! - Id lists that are not tables (packed little-endian `u64`s): [`unpack`].
//!
//! ```
//! use relcache_protocol::idset::{rebuild_with, validate, Builder, TableMut};
//!
//! let mut bytes = Builder::new().build(&[10, 20, 30, 0]);
//! let table = validate(&bytes).unwrap();
//! assert!(table.contains(0) && table.contains(20) && !table.contains(25));
//! assert_eq!(table.len(), 4);
//!
//! let mut table = TableMut::open(&mut bytes).unwrap();
//! let added = match table.insert(40) {
//!     Ok(added) => added,
//!     Err(_full) => {
//!         // Full means 40 is absent; the rebuilt table holds it.
//!         bytes = rebuild_with(&table.as_table(), &[40], 0).unwrap();
//!         true
//!     }
//! };
//! assert!(added);
//! assert!(validate(&bytes).unwrap().contains(40));
//! ```

mod build;
mod hash;
mod packed;
mod prime;
mod table;
mod validate;

pub use build::{capacity_for, rebuild, rebuild_with, Builder, TooLarge};
pub use hash::{fastrange, hash, mix, start_and_step};
pub use packed::{unpack, Packed, RaggedPacked, PACKED_ID_LEN};
pub use prime::{is_prime, next_prime};
pub use table::{ContainsEach, Full, Header, Iter, Slots, TableMut, TableRef, MASK_IDS};
pub use validate::{
    check, looks_like_table, validate, validate_mut, Check, FormatError, SAMPLE_SLOTS,
};

/// The first six bytes of every table: `\x89RCIDS`.
pub const MAGIC: [u8; 6] = [0x89, b'R', b'C', b'I', b'D', b'S'];
/// The format version this crate reads and writes.
pub const VERSION: u8 = 1;

/// Length of the header; slot 0 starts here.
pub const HEADER_LEN: usize = 32;
/// Length of one slot.
pub const SLOT_LEN: usize = 8;

/// Offset of [`MAGIC`] (6 bytes).
pub const OFF_MAGIC: usize = 0;
/// Offset of the version byte.
pub const OFF_VERSION: usize = 6;
/// Offset of the flags byte.
pub const OFF_FLAGS: usize = 7;
/// Offset of the hash seed (u64).
pub const OFF_SEED: usize = 8;
/// Offset of the capacity, the number of slots (u32).
pub const OFF_CAPACITY: usize = 16;
/// Offset of the number of ids stored in slots (u32).
pub const OFF_COUNT: usize = 20;
/// Offset of the number of [`DELETED`] slots (u32).
pub const OFF_DELETED: usize = 24;
/// Offset of the reserved field (u32, must be zero).
pub const OFF_RESERVED: usize = 28;

/// Flag bit: id 0 ([`EMPTY`]) is a member.
pub const FLAG_HAS_ZERO: u8 = 0x01;
/// Flag bit: id `u64::MAX` ([`DELETED`]) is a member.
pub const FLAG_HAS_MAX: u8 = 0x02;
/// Every flag bit version 1 defines; the others must be zero.
pub const FLAGS_KNOWN: u8 = FLAG_HAS_ZERO | FLAG_HAS_MAX;

/// Slot value of a slot that never held an id: ends every lookup.
pub const EMPTY: u64 = 0;
/// Slot value of a slot whose id was removed: lookups continue past it.
pub const DELETED: u64 = u64::MAX;

/// Smallest capacity: the smallest prime, room for one id and the required empty slot.
pub const MIN_CAPACITY: u32 = 2;
/// Largest capacity: the largest prime below 2^32 (a table of 32 GiB).
pub const MAX_CAPACITY: u32 = 4_294_967_291;

/// Seed the builder uses unless told otherwise (the 64-bit golden ratio, as in
/// splitmix64), so default builds are deterministic and test vectors exact.
pub const DEFAULT_SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// Fraction of the slots the builder fills (ids plus reserved room): 0.75, which costs
/// about 10.7 bytes per id (8 / 0.75) right after a build, and leaves room for the
/// in-place adds allowed up to [`inplace_limit`].
pub const DEFAULT_MAX_LOAD: f64 = 0.75;

/// The longest lookup: every id stored in a slot sits within the first `MAX_PROBE`
/// slots of its probe sequence, so a lookup that has read that many slots without
/// meeting the id knows it is absent and stops. Any lookup in a valid table, of a
/// member or not, reads at most `min(capacity, MAX_PROBE)` slots, however the table
/// was laid out: a command's cost follows the ids it names, never a table's capacity.
///
/// Why 128: with double hashing an insert at load `a` needs more than 128 reads with
/// probability about `a^128`: 1e-16 at the builder's 0.75, 1e-6 at the in-place limit
/// of 0.9. Honest tables essentially never meet the bound; when an id would land past
/// it, the builder tries another seed or a larger capacity ([`Builder`]) and an
/// in-place insert returns [`Full`].
pub const MAX_PROBE: u32 = 128;

/// How many slots a lookup in a table of `capacity` slots reads at most.
#[must_use]
pub const fn probe_limit(capacity: u32) -> u32 {
    if capacity < MAX_PROBE {
        capacity
    } else {
        MAX_PROBE
    }
}

/// What the builder adds to the seed (wrapping) when an id would land past
/// [`MAX_PROBE`]: the 64-bit golden ratio, so successive seeds share no structure.
pub const RESEED_STEP: u64 = 0x9E37_79B9_7F4A_7C15;

/// Seeds the builder tries at one capacity before it moves to the next prime at least
/// twice as large. Reseeding comes first because ids crafted to collide under one
/// known seed do not collide under the next; growing first would let such ids force
/// a table many times larger than its members need.
pub const SEEDS_PER_CAPACITY: u32 = 4;

/// How many slots may be in use (`count + deleted`) after an in-place insert into an
/// empty slot: `capacity - ceil(capacity / 10)`, so at least a tenth of the slots (and
/// at least one) stay [`EMPTY`] and an unsuccessful lookup reads about 10 slots at
/// most on average. An insert that would go past it returns [`Full`].
#[must_use]
pub const fn inplace_limit(capacity: u32) -> u32 {
    capacity - capacity.div_ceil(10)
}

/// Total length in bytes of a table with `capacity` slots (as u64, so it cannot
/// overflow even on 32-bit targets).
#[must_use]
pub const fn table_len(capacity: u32) -> u64 {
    HEADER_LEN as u64 + SLOT_LEN as u64 * capacity as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_constants_tile_the_header() {
        assert_eq!(OFF_MAGIC + MAGIC.len(), OFF_VERSION);
        assert_eq!(OFF_VERSION + 1, OFF_FLAGS);
        assert_eq!(OFF_FLAGS + 1, OFF_SEED);
        assert_eq!(OFF_SEED + 8, OFF_CAPACITY);
        assert_eq!(OFF_CAPACITY + 4, OFF_COUNT);
        assert_eq!(OFF_COUNT + 4, OFF_DELETED);
        assert_eq!(OFF_DELETED + 4, OFF_RESERVED);
        assert_eq!(OFF_RESERVED + 4, HEADER_LEN);
        assert_eq!(HEADER_LEN % SLOT_LEN, 0);
    }

    #[test]
    fn limits() {
        assert!(is_prime(MIN_CAPACITY));
        assert!(is_prime(MAX_CAPACITY));
        assert_eq!(next_prime(MAX_CAPACITY as u64 + 1), None);
        assert_eq!(inplace_limit(2), 1);
        assert_eq!(inplace_limit(3), 2);
        assert_eq!(inplace_limit(11), 9);
        assert_eq!(inplace_limit(101), 90);
        assert_eq!(inplace_limit(MAX_CAPACITY), MAX_CAPACITY - 429_496_730);
        for cap in MIN_CAPACITY..10_000 {
            assert!(inplace_limit(cap) < cap);
        }
        assert_eq!(table_len(MAX_CAPACITY), 32 + 8 * 4_294_967_291);
        assert_eq!(probe_limit(2), 2);
        assert_eq!(probe_limit(127), 127);
        assert_eq!(probe_limit(131), MAX_PROBE);
        assert_eq!(probe_limit(MAX_CAPACITY), MAX_PROBE);
    }
}
