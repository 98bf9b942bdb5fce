//! Views over table bytes: [`Header`], the read-only [`TableRef`] and the in-place
//! [`TableMut`]. They own nothing and allocate nothing.
//!
//! Every lookup here reads at most [`probe_limit`]`(capacity)` slots
//! ([`MAX_PROBE`](super::MAX_PROBE) for any table of more than 128 slots), and every
//! slot read is inside the slice (the header check ties the slice length to the
//! capacity), so even bytes that were never validated cannot make these loop, panic,
//! read out of bounds or take longer than a valid table would; they can only give
//! wrong answers about themselves. Use [`validate`](super::validate) on bytes you did
//! not build or validate yourself.

use std::fmt;
use std::hint::select_unpredictable;
use std::slice::ChunksExact;

use super::hash::{hash, start_and_step};
use super::validate::FormatError;
use super::{
    inplace_limit, probe_limit, table_len, DELETED, EMPTY, FLAGS_KNOWN, FLAG_HAS_MAX,
    FLAG_HAS_ZERO, HEADER_LEN, MAGIC, MAX_CAPACITY, MIN_CAPACITY, OFF_CAPACITY, OFF_COUNT,
    OFF_DELETED, OFF_FLAGS, OFF_MAGIC, OFF_RESERVED, OFF_SEED, OFF_VERSION, SLOT_LEN, VERSION,
};

#[inline]
pub(crate) fn read_u32(bytes: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(bytes[off..off + 4].try_into().unwrap())
}

#[inline]
pub(crate) fn read_u64(bytes: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(bytes[off..off + 8].try_into().unwrap())
}

#[inline]
pub(crate) fn write_u32(bytes: &mut [u8], off: usize, v: u32) {
    bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline]
pub(crate) fn write_u64(bytes: &mut [u8], off: usize, v: u64) {
    bytes[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Byte offset of slot `i`.
#[inline]
pub(crate) fn slot_off(i: u64) -> usize {
    HEADER_LEN + SLOT_LEN * i as usize
}

/// The value in slot `i` of a whole table (header included).
#[inline]
pub(crate) fn read_slot(bytes: &[u8], i: u64) -> u64 {
    read_u64(bytes, slot_off(i))
}

/// Consecutive little-endian `u64` words: the raw values of a run of slots (ids
/// and the [`EMPTY`] / [`DELETED`] markers), or packed ids. The one place words are
/// decoded in bulk, for iteration, validation and [`unpack`](super::unpack).
#[derive(Clone, Debug)]
pub(crate) struct Words<'a>(ChunksExact<'a, u8>);

impl<'a> Words<'a> {
    /// The words of `bytes`; a trailing part shorter than a word is ignored.
    #[inline]
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self(bytes.chunks_exact(SLOT_LEN))
    }
}

impl Iterator for Words<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        self.0.next().map(|word| read_u64(word, 0))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Words<'_> {}

/// The id a slot value stands for: `None` for an empty or deleted slot.
#[inline]
fn slot_id(v: u64) -> Option<u64> {
    (v != EMPTY && v != DELETED).then_some(v)
}

/// The probe sequence of `id`; callers walk at most [`probe_limit`]`(capacity)` of
/// it. Indices are `u64` so `slot + step` cannot overflow for any `u32` capacity.
#[derive(Clone, Copy)]
pub(crate) struct Probe {
    slot: u64,
    step: u64,
    cap: u64,
}

impl Probe {
    #[inline]
    pub(crate) fn new(id: u64, seed: u64, capacity: u32) -> Self {
        let (start, step) = start_and_step(hash(id, seed), capacity);
        Self {
            slot: u64::from(start),
            step: u64::from(step),
            cap: u64::from(capacity),
        }
    }

    #[inline]
    pub(crate) fn slot(&self) -> u64 {
        self.slot
    }

    #[inline]
    pub(crate) fn advance(&mut self) {
        self.slot += self.step;
        if self.slot >= self.cap {
            self.slot -= self.cap;
        }
    }
}

/// Where a lookup for an id ended.
enum Lookup {
    /// The id is in this slot.
    Found(u64),
    /// The id is absent. `reuse` is the first [`DELETED`] slot on its probe path, `empty`
    /// the [`EMPTY`] slot that ended the lookup (`None` when the lookup read
    /// [`probe_limit`] slots without meeting one: the id's free slot would lie past the
    /// bound).
    Absent {
        reuse: Option<u64>,
        empty: Option<u64>,
    },
}

/// A lookup of a slot id (not 0 or `u64::MAX`): until the id, an empty slot, or
/// [`probe_limit`] reads, past which a valid table holds no id of that sequence.
#[inline]
fn lookup(bytes: &[u8], capacity: u32, seed: u64, id: u64) -> Lookup {
    let mut probe = Probe::new(id, seed, capacity);
    let mut reuse = None;
    for _ in 0..probe_limit(capacity) {
        let v = read_slot(bytes, probe.slot());
        if v == id {
            return Lookup::Found(probe.slot());
        }
        if v == EMPTY {
            return Lookup::Absent {
                reuse,
                empty: Some(probe.slot()),
            };
        }
        if v == DELETED && reuse.is_none() {
            reuse = Some(probe.slot());
        }
        probe.advance();
    }
    Lookup::Absent { reuse, empty: None }
}

/// Whether slot id `id` is in the table: the hot path, kept minimal.
#[inline]
fn contains_in_slots(bytes: &[u8], capacity: u32, seed: u64, id: u64) -> bool {
    let mut probe = Probe::new(id, seed, capacity);
    for _ in 0..probe_limit(capacity) {
        let v = read_slot(bytes, probe.slot());
        if v == id {
            return true;
        }
        if v == EMPTY {
            return false;
        }
        probe.advance();
    }
    false
}

/// How many reads of each lookup [`TableRef::contains_mask`] makes in lock step.
/// At the format's load of about 0.74, just under half the lookups of a batch
/// (half of them members) end on their first read and about five in eight by
/// their second. In `cargo bench -p relcache-protocol --bench idset -- batch`, one
/// round was about 6% faster in cache and 5% slower out of it; three were 3%
/// slower in cache and 5% faster out of it, inside two rounds' own spread.
pub(crate) const LOCKSTEP_READS: u32 = 2;

// The first read is fused with working out where each lookup starts, so the
// lock step makes at least that one, and the reads after it add up to the bound.
const _: () = assert!(LOCKSTEP_READS >= 1);

/// The slot after `slot` in a probe sequence of `step` over `cap` slots (both
/// below `cap`, whose sum fits a `u64` whatever the capacity).
#[inline]
fn next_slot(slot: u32, step: u32, cap: u32) -> u32 {
    let (next, cap) = (u64::from(slot) + u64::from(step), u64::from(cap));
    // Whether the sequence wraps depends on the random step: no predictor learns it.
    select_unpredictable(next >= cap, next.wrapping_sub(cap), next) as u32
}

/// The answers of [`TableRef::contains_each`].
#[derive(Clone, Debug)]
#[must_use = "iterators are lazy and do nothing unless consumed"]
pub struct ContainsEach<'a, I> {
    table: TableRef<'a>,
    ids: I,
    /// The answers not yet given of the chunk looked up last, lowest bit next.
    mask: u64,
    /// How many of those there are.
    left: usize,
}

impl<I: Iterator<Item = u64>> Iterator for ContainsEach<'_, I> {
    type Item = bool;

    #[inline]
    fn next(&mut self) -> Option<bool> {
        if self.left == 0 {
            let mut chunk = [0u64; MASK_IDS];
            self.left = fill_chunk(&mut chunk, &mut self.ids);
            if self.left == 0 {
                return None;
            }
            self.mask = self.table.chunk_mask(&chunk, self.left);
        }
        self.left -= 1;
        let hit = self.mask & 1 == 1;
        self.mask >>= 1;
        Some(hit)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let (lo, hi) = self.ids.size_hint();
        (
            lo.saturating_add(self.left),
            hi.and_then(|hi| hi.checked_add(self.left)),
        )
    }
}

impl<I: ExactSizeIterator<Item = u64>> ExactSizeIterator for ContainsEach<'_, I> {}

impl<I: std::iter::FusedIterator<Item = u64>> std::iter::FusedIterator for ContainsEach<'_, I> {}

/// Fills `chunk` from `ids` as far as both go; returns how many it took.
fn fill_chunk(chunk: &mut [u64; MASK_IDS], ids: &mut impl Iterator<Item = u64>) -> usize {
    // `chunk` first: the zip stops at a full chunk without taking an id.
    chunk.iter_mut().zip(ids).map(|(c, id)| *c = id).count()
}

/// How many of a table's cache lines a lookup may stand for before
/// [`TableRef::prefetch_for`] declines: 100 lookups read about 250 slots, which
/// in a table of 400 lines fall in about half of them.
const PREFETCH_LINES_PER_LOOKUP: usize = 4;

/// The largest table [`TableRef::prefetch_for`] fetches whole, whatever the batch:
/// 1,024 lines (about 6,000 ids), well inside the L2 cache of any current x86-64
/// core. Measured only up to 340 lines; this bounds what was not.
const PREFETCH_MAX_BYTES: usize = 64 * 1024;

const CACHE_LINE: usize = 64;

/// The most ids [`TableRef::contains_mask`] looks up at once: a bit each in a `u64`.
pub const MASK_IDS: usize = 64;

/// The flag bit that stands for `id` in the header, if `id` is a marker value.
#[inline]
pub(crate) fn flag_for(id: u64) -> Option<u8> {
    match id {
        EMPTY => Some(FLAG_HAS_ZERO),
        DELETED => Some(FLAG_HAS_MAX),
        _ => None,
    }
}

/// The decoded 32-byte header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// Format version ([`VERSION`]).
    pub version: u8,
    /// [`FLAG_HAS_ZERO`] and [`FLAG_HAS_MAX`].
    pub flags: u8,
    /// Hash seed.
    pub seed: u64,
    /// Number of slots.
    pub capacity: u32,
    /// Number of ids stored in slots (the flag ids not included).
    pub count: u32,
    /// Number of [`DELETED`] slots.
    pub deleted: u32,
}

impl Header {
    /// Decodes and checks the header of `bytes`, a whole table: magic, version, flag
    /// bits, reserved field, capacity range, and `bytes.len() == 32 + 8 * capacity`.
    /// O(1): it does not look at the slots or test the capacity for primality (see
    /// [`validate`](super::validate) for that).
    ///
    /// # Errors
    ///
    /// The first [`FormatError`] found, in the order listed above (a short input that
    /// is not a prefix of the magic is [`FormatError::BadMagic`], one that is, is
    /// [`FormatError::TooShort`]).
    pub fn parse(bytes: &[u8]) -> Result<Self, FormatError> {
        let magic_end = OFF_MAGIC + MAGIC.len();
        let prefix = &bytes[..bytes.len().min(magic_end)];
        if prefix != &MAGIC[..prefix.len()] {
            return Err(FormatError::BadMagic);
        }
        if bytes.len() < HEADER_LEN {
            return Err(FormatError::TooShort { len: bytes.len() });
        }
        let version = bytes[OFF_VERSION];
        if version != VERSION {
            return Err(FormatError::UnsupportedVersion { version });
        }
        let flags = bytes[OFF_FLAGS];
        if flags & !FLAGS_KNOWN != 0 {
            return Err(FormatError::UnknownFlags { flags });
        }
        let reserved = read_u32(bytes, OFF_RESERVED);
        if reserved != 0 {
            return Err(FormatError::ReservedNotZero { reserved });
        }
        let capacity = read_u32(bytes, OFF_CAPACITY);
        if !(MIN_CAPACITY..=MAX_CAPACITY).contains(&capacity) {
            return Err(FormatError::CapacityOutOfRange { capacity });
        }
        if bytes.len() as u64 != table_len(capacity) {
            return Err(FormatError::LengthMismatch {
                len: bytes.len(),
                capacity,
                expected: table_len(capacity),
            });
        }
        Ok(Self {
            version,
            flags,
            seed: read_u64(bytes, OFF_SEED),
            capacity,
            count: read_u32(bytes, OFF_COUNT),
            deleted: read_u32(bytes, OFF_DELETED),
        })
    }

    /// Reads the header fields of a table whose header was already checked.
    fn read_unchecked(bytes: &[u8]) -> Self {
        Self {
            version: bytes[OFF_VERSION],
            flags: bytes[OFF_FLAGS],
            seed: read_u64(bytes, OFF_SEED),
            capacity: read_u32(bytes, OFF_CAPACITY),
            count: read_u32(bytes, OFF_COUNT),
            deleted: read_u32(bytes, OFF_DELETED),
        }
    }

    /// The 32 header bytes: magic, these fields, reserved field zero.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[OFF_MAGIC..OFF_MAGIC + MAGIC.len()].copy_from_slice(&MAGIC);
        out[OFF_VERSION] = self.version;
        out[OFF_FLAGS] = self.flags;
        write_u64(&mut out, OFF_SEED, self.seed);
        write_u32(&mut out, OFF_CAPACITY, self.capacity);
        write_u32(&mut out, OFF_COUNT, self.count);
        write_u32(&mut out, OFF_DELETED, self.deleted);
        out
    }

    /// Number of members: ids in slots plus the flag ids.
    #[must_use]
    pub fn len(&self) -> u64 {
        u64::from(self.count) + u64::from((self.flags & FLAGS_KNOWN).count_ones())
    }

    /// Whether the set has no members.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A read-only view of a table.
///
/// Obtained from [`validate`](super::validate) (untrusted bytes: full check) or
/// [`TableRef::open`] (bytes known to be valid: header check only). Cheap to copy.
#[derive(Clone, Copy)]
pub struct TableRef<'a> {
    bytes: &'a [u8],
    header: Header,
}

impl<'a> TableRef<'a> {
    /// A view of `bytes` after checking only the header ([`Header::parse`], O(1)).
    ///
    /// Meant for bytes that were validated before, such as a value the server
    /// validated when it was stored and has only changed through [`TableMut`] since.
    /// On other bytes every method is still memory-safe, bounded and panic-free, but
    /// answers about the set may be wrong.
    ///
    /// # Errors
    ///
    /// The [`FormatError`] of [`Header::parse`].
    pub fn open(bytes: &'a [u8]) -> Result<Self, FormatError> {
        let header = Header::parse(bytes)?;
        Ok(Self { bytes, header })
    }

    /// Whether `id` is a member. Reads at most [`probe_limit`]`(capacity)` slots.
    #[inline]
    #[must_use]
    pub fn contains(&self, id: u64) -> bool {
        match flag_for(id) {
            Some(bit) => self.header.flags & bit != 0,
            None => contains_in_slots(self.bytes, self.header.capacity, self.header.seed, id),
        }
    }

    /// Whether each of `ids` is a member, as bit `i` of the result for `ids[i]`: the
    /// answers of [`contains`](Self::contains) for up to [`MASK_IDS`] ids at once.
    ///
    /// A lookup on its own branches on every slot it reads (the id, an empty slot,
    /// or read on), and at the format's load no predictor can learn which: each
    /// miss throws away what the core had started on the lookups after it, so in a
    /// table out of cache their reads wait one behind another. Here every lookup
    /// makes its first two reads in lock step with the others, a round of reads at
    /// a time with no branch on what they find, so a round's reads overlap in the
    /// core and in the memory system. About five lookups in eight end within them;
    /// the rest go on one at a time, since rounds of a few stragglers cost more in
    /// their own overhead than they save. Every lookup reads exactly the slots, and
    /// gives exactly the answer, it would alone.
    ///
    /// # Panics
    ///
    /// If `ids` holds more than [`MASK_IDS`] ids.
    #[must_use]
    pub fn contains_mask(&self, ids: &[u64]) -> u64 {
        assert!(ids.len() <= MASK_IDS, "at most {MASK_IDS} ids a mask");
        let mut chunk = [0u64; MASK_IDS];
        chunk[..ids.len()].copy_from_slice(ids);
        self.chunk_mask(&chunk, ids.len())
    }

    /// [`contains_mask`](Self::contains_mask) of `want[..n]`, from a whole chunk
    /// (indexed by `i & (MASK_IDS - 1)`, which needs no bounds check).
    #[inline]
    fn chunk_mask(&self, want: &[u64; MASK_IDS], n: usize) -> u64 {
        let (cap, seed) = (self.header.capacity, self.header.seed);
        let mut found = 0u64;
        // Bit i: the lookup of want[i] is still going. Kept in a register rather
        // than as a list in memory: a list compacted as it goes is stored to at
        // places that depend on the slots just read, and the core then holds the
        // loads after each store back until those reads are in.
        let mut going = 0u64;
        let mut slot = [0u32; MASK_IDS];
        let mut step = [0u32; MASK_IDS];
        // The first round, with working out where each lookup starts: every slot id
        // takes part, so the lookups go in order and need no bit scan.
        let mut bit = 1u64;
        for (i, &id) in want[..n].iter().enumerate() {
            match flag_for(id) {
                // The same header flag for the whole batch: a branch predicts it.
                Some(flag) if self.header.flags & flag != 0 => found |= bit,
                Some(_) => {}
                None => {
                    let (first, stride) = start_and_step(hash(id, seed), cap);
                    let v = read_slot(self.bytes, u64::from(first));
                    // Selects, never branches: what was read decides them.
                    found |= select_unpredictable(v == id, bit, 0);
                    going |= select_unpredictable((v == id) | (v == EMPTY), 0, bit);
                    slot[i & (MASK_IDS - 1)] = next_slot(first, stride, cap);
                    step[i & (MASK_IDS - 1)] = stride;
                }
            }
            bit <<= 1;
        }
        // Every capacity is at least MIN_CAPACITY, so the bound allows a first read.
        let limit = probe_limit(cap);
        let rounds = limit.min(LOCKSTEP_READS);
        for _ in 1..rounds {
            let mut left = going;
            while left != 0 {
                // Bit i itself rather than shifts by i: on Intel cores x86-64's
                // baseline shift by a register is three micro-ops.
                let bit = left & left.wrapping_neg();
                left ^= bit;
                let i = bit.trailing_zeros() as usize & (MASK_IDS - 1);
                let v = read_slot(self.bytes, u64::from(slot[i]));
                let hit = v == want[i];
                found |= select_unpredictable(hit, bit, 0);
                // Bit i is set in `going`: this clears it if the lookup ends here.
                going ^= select_unpredictable(hit | (v == EMPTY), bit, 0);
                slot[i] = next_slot(slot[i], step[i], cap);
            }
        }
        let mut left = going;
        while left != 0 {
            let i = left.trailing_zeros() as usize & (MASK_IDS - 1);
            left &= left - 1;
            for _ in rounds..limit {
                let v = read_slot(self.bytes, u64::from(slot[i]));
                if v == want[i] {
                    found |= 1u64 << i;
                    break;
                }
                if v == EMPTY {
                    break;
                }
                slot[i] = next_slot(slot[i], step[i], cap);
            }
        }
        found
    }

    /// [`contains_mask`](Self::contains_mask) over any number of ids: a mask for
    /// each [`MASK_IDS`] of them in turn (the last one for what is left), after
    /// [`prefetch_for`](Self::prefetch_for) as many lookups as `ids` says it holds.
    pub fn contains_masks<I>(&self, ids: I) -> impl Iterator<Item = u64> + 'a
    where
        I: IntoIterator<Item = u64>,
        I::IntoIter: 'a,
    {
        let (table, mut ids) = (*self, ids.into_iter());
        table.prefetch_for(ids.size_hint().0);
        std::iter::from_fn(move || {
            let mut chunk = [0u64; MASK_IDS];
            let n = fill_chunk(&mut chunk, &mut ids);
            (n > 0).then(|| table.chunk_mask(&chunk, n))
        })
    }

    /// Whether each of `ids` is a member, in order: the answers of
    /// [`contains`](Self::contains), looked up [`MASK_IDS`] at a time as
    /// [`contains_mask`](Self::contains_mask) does, after
    /// [`prefetch_for`](Self::prefetch_for) as many lookups as `ids` says it holds.
    /// As long as `ids` says how many it holds, so does the result, and a `collect`
    /// allocates once.
    pub fn contains_each<I: IntoIterator<Item = u64>>(
        &self,
        ids: I,
    ) -> ContainsEach<'a, I::IntoIter> {
        let ids = ids.into_iter();
        self.prefetch_for(ids.size_hint().0);
        ContainsEach {
            table: *self,
            ids,
            mask: 0,
            left: 0,
        }
    }

    /// Asks the CPU to bring the table into cache ahead of `lookups` lookups, when
    /// they would read a good share of its cache lines anyway; otherwise does
    /// nothing.
    ///
    /// A lookup reads two or three slots, each in a random cache line, and each
    /// read must come back before the lookup knows whether to read on: in a table
    /// out of cache, a batch's lookups wait on memory one read after another.
    /// Asked for all at once, the lines come in together, and a run of adjacent
    /// lines is what the memory system fetches fastest. For 100 lookups in a table
    /// of 2,000 ids (340 lines) it takes about a quarter off the batch out of
    /// cache and adds 0.1–0.25 µs in cache, where the prefetches are wasted
    /// instructions (`cargo bench -p relcache-protocol --bench idset --
    /// batch`). Past `PREFETCH_LINES_PER_LOOKUP` lines a lookup most of the lines
    /// fetched would go unread, and past `PREFETCH_MAX_BYTES` the first would be
    /// pushed out of the nearer caches before the lookups reach them, so bigger
    /// tables are left to the lookups themselves. Does nothing on other
    /// architectures than x86-64.
    #[inline]
    pub fn prefetch_for(&self, lookups: usize) {
        let budget = lookups
            .saturating_mul(PREFETCH_LINES_PER_LOOKUP * CACHE_LINE)
            .min(PREFETCH_MAX_BYTES);
        if self.bytes.len() > budget {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // Every line the slice touches, the partial ones at both ends included.
            let first = self.bytes.as_ptr();
            let misalign = first as usize % CACHE_LINE;
            let lines = (misalign + self.bytes.len()).div_ceil(CACHE_LINE);
            for k in 0..lines {
                let line = first.wrapping_sub(misalign).wrapping_add(k * CACHE_LINE);
                // SAFETY: a prefetch is a hint: it reads nothing the program sees
                // and cannot fault, whatever the address; this one is in a line
                // the slice occupies.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(line.cast()) };
            }
        }
    }

    /// Number of members (ids in slots plus the flag ids), as the header says.
    #[must_use]
    pub fn len(&self) -> u64 {
        self.header.len()
    }

    /// Whether the set has no members.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.header.is_empty()
    }

    /// The decoded header.
    #[must_use]
    pub fn header(&self) -> Header {
        self.header
    }

    /// Number of slots.
    #[must_use]
    pub fn capacity(&self) -> u32 {
        self.header.capacity
    }

    /// Number of ids stored in slots (members other than 0 and `u64::MAX`).
    #[must_use]
    pub fn count(&self) -> u32 {
        self.header.count
    }

    /// Number of [`DELETED`] slots.
    #[must_use]
    pub fn deleted(&self) -> u32 {
        self.header.deleted
    }

    /// The hash seed.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.header.seed
    }

    /// Fraction of the slots in use, live or deleted: `(count + deleted) / capacity`.
    /// This, not the live count, is what lookup cost depends on.
    #[must_use]
    pub fn load_factor(&self) -> f64 {
        (f64::from(self.header.count) + f64::from(self.header.deleted))
            / f64::from(self.header.capacity)
    }

    /// How many more ids can be inserted into empty slots before
    /// [`TableMut::insert`] returns [`Full`] for want of room (see [`inplace_limit`]).
    /// Inserts that reuse a deleted slot do not use this room. An insert may also
    /// return `Full`, rarely, while there is room: when the id's free slot would lie
    /// past [`MAX_PROBE`](super::MAX_PROBE).
    #[must_use]
    pub fn room_in_place(&self) -> u32 {
        let used = self.header.count.saturating_add(self.header.deleted);
        inplace_limit(self.header.capacity).saturating_sub(used)
    }

    /// Every member once: 0 first if it is a member, then the slot ids in slot order,
    /// then `u64::MAX` if it is a member.
    #[must_use]
    pub fn iter(&self) -> Iter<'a> {
        Iter {
            zero: self.header.flags & FLAG_HAS_ZERO != 0,
            max: self.header.flags & FLAG_HAS_MAX != 0,
            slots: self.slots(0),
        }
    }

    /// The id held in slot `i`: `None` if the slot is empty or deleted, or if `i` is
    /// not below the capacity. The flag ids (0 and `u64::MAX`) are never in a slot.
    #[inline]
    #[must_use]
    pub fn slot(&self, i: u64) -> Option<u64> {
        if i >= u64::from(self.header.capacity) {
            return None;
        }
        slot_id(read_slot(self.bytes, i))
    }

    /// The slots from slot `from` to the last, in order: for each, the id it holds
    /// or `None` (empty or deleted). Empty if `from` is not below the capacity. This
    /// is the walk a cursor over slot positions (SSCAN, IDSET.SCAN) makes; slots
    /// never move while a table lives, so a position stays meaningful between calls.
    #[must_use]
    pub fn slots(&self, from: u64) -> Slots<'a> {
        let first = from.min(u64::from(self.header.capacity));
        Slots {
            values: Words::new(&self.bytes[slot_off(first)..]),
        }
    }

    /// The whole table, header included.
    #[must_use]
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl fmt::Debug for TableRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableRef")
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl<'a> IntoIterator for &TableRef<'a> {
    type Item = u64;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// Iterator over slots of a table; see [`TableRef::slots`].
#[derive(Clone)]
pub struct Slots<'a> {
    values: Words<'a>,
}

impl Iterator for Slots<'_> {
    type Item = Option<u64>;

    #[inline]
    fn next(&mut self) -> Option<Option<u64>> {
        self.values.next().map(slot_id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.values.size_hint()
    }
}

impl ExactSizeIterator for Slots<'_> {}

impl std::iter::FusedIterator for Slots<'_> {}

impl fmt::Debug for Slots<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slots")
            .field("left", &self.len())
            .finish_non_exhaustive()
    }
}

/// Iterator over the members of a table; see [`TableRef::iter`].
#[derive(Clone)]
pub struct Iter<'a> {
    zero: bool,
    max: bool,
    slots: Slots<'a>,
}

impl Iterator for Iter<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.zero {
            self.zero = false;
            return Some(EMPTY);
        }
        if let Some(id) = self.slots.by_ref().flatten().next() {
            return Some(id);
        }
        if self.max {
            self.max = false;
            return Some(DELETED);
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let flags = usize::from(self.zero) + usize::from(self.max);
        (flags, self.slots.len().checked_add(flags))
    }
}

impl std::iter::FusedIterator for Iter<'_> {}

impl fmt::Debug for Iter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter")
            .field("slots_left", &self.slots.len())
            .finish_non_exhaustive()
    }
}

/// The table has no room in place for the id being inserted, which is absent: the
/// table is at its in-place limit, or the id's free slot would lie past
/// [`MAX_PROBE`](super::MAX_PROBE). Rebuild it with the id ([`rebuild_with`](super::rebuild_with)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("idset table is full; rebuild it with more capacity")]
pub struct Full;

/// A view of a table that inserts and removes ids in place, keeping the header's
/// flags, count and deleted count right.
///
/// Obtained from [`validate_mut`](super::validate_mut) (untrusted bytes) or
/// [`TableMut::open`] (bytes known to be valid). An operation on a valid table leaves
/// it valid.
pub struct TableMut<'a> {
    bytes: &'a mut [u8],
    capacity: u32,
    seed: u64,
}

impl<'a> TableMut<'a> {
    /// A mutable view of `bytes` after checking only the header, as
    /// [`TableRef::open`]. On bytes that are not a valid table, operations stay
    /// memory-safe, bounded and panic-free but may corrupt the set further.
    ///
    /// # Errors
    ///
    /// The [`FormatError`] of [`Header::parse`].
    pub fn open(bytes: &'a mut [u8]) -> Result<Self, FormatError> {
        let header = Header::parse(bytes)?;
        Ok(Self {
            bytes,
            capacity: header.capacity,
            seed: header.seed,
        })
    }

    /// A read-only view of the table as it is now.
    #[must_use]
    pub fn as_table(&self) -> TableRef<'_> {
        TableRef {
            bytes: self.bytes,
            header: Header::read_unchecked(self.bytes),
        }
    }

    /// Whether `id` is a member.
    #[must_use]
    pub fn contains(&self, id: u64) -> bool {
        match flag_for(id) {
            Some(bit) => self.flags() & bit != 0,
            None => contains_in_slots(self.bytes, self.capacity, self.seed, id),
        }
    }

    /// Number of members.
    #[must_use]
    pub fn len(&self) -> u64 {
        Header::read_unchecked(self.bytes).len()
    }

    /// Whether the set has no members.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds `id`. Returns whether it was newly added (`Ok(false)`: already a member).
    ///
    /// The id goes into the first [`DELETED`] slot on its probe path if there is one
    /// (only after the lookup has reached an [`EMPTY`] slot, or read
    /// [`MAX_PROBE`](super::MAX_PROBE) slots, without finding the id), otherwise into
    /// that empty slot. Ids 0 and `u64::MAX` only set a header flag.
    ///
    /// # Errors
    ///
    /// [`Full`] if the id is absent, no deleted slot is within the first
    /// [`probe_limit`] slots of its path, and either no empty slot is either (the id
    /// would sit past the bound) or taking it would make `count + deleted` exceed
    /// [`inplace_limit`]`(capacity)`. The table is unchanged then.
    pub fn insert(&mut self, id: u64) -> Result<bool, Full> {
        if let Some(bit) = flag_for(id) {
            let flags = self.flags();
            self.bytes[OFF_FLAGS] = flags | bit;
            return Ok(flags & bit == 0);
        }
        let count = read_u32(self.bytes, OFF_COUNT);
        let deleted = read_u32(self.bytes, OFF_DELETED);
        match lookup(self.bytes, self.capacity, self.seed, id) {
            Lookup::Found(_) => return Ok(false),
            Lookup::Absent {
                reuse: Some(slot), ..
            } => {
                write_u64(self.bytes, slot_off(slot), id);
                write_u32(self.bytes, OFF_DELETED, deleted.saturating_sub(1));
            }
            Lookup::Absent {
                reuse: None,
                empty: Some(slot),
            } => {
                let used = u64::from(count) + u64::from(deleted);
                if used + 1 > u64::from(inplace_limit(self.capacity)) {
                    return Err(Full);
                }
                write_u64(self.bytes, slot_off(slot), id);
            }
            Lookup::Absent {
                reuse: None,
                empty: None,
            } => return Err(Full),
        }
        write_u32(self.bytes, OFF_COUNT, count.saturating_add(1));
        Ok(true)
    }

    /// Removes `id`. Returns whether it was a member.
    ///
    /// Its slot becomes [`DELETED`] (not [`EMPTY`]: other ids' probe paths may pass
    /// through it). Ids 0 and `u64::MAX` only clear a header flag.
    pub fn remove(&mut self, id: u64) -> bool {
        if let Some(bit) = flag_for(id) {
            let flags = self.flags();
            self.bytes[OFF_FLAGS] = flags & !bit;
            return flags & bit != 0;
        }
        let Lookup::Found(slot) = lookup(self.bytes, self.capacity, self.seed, id) else {
            return false;
        };
        write_u64(self.bytes, slot_off(slot), DELETED);
        let count = read_u32(self.bytes, OFF_COUNT);
        let deleted = read_u32(self.bytes, OFF_DELETED);
        write_u32(self.bytes, OFF_COUNT, count.saturating_sub(1));
        write_u32(self.bytes, OFF_DELETED, deleted.saturating_add(1));
        true
    }

    /// The whole table, header included.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes
    }

    fn flags(&self) -> u8 {
        self.bytes[OFF_FLAGS]
    }
}

impl fmt::Debug for TableMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TableMut")
            .field("header", &Header::read_unchecked(self.bytes))
            .finish_non_exhaustive()
    }
}
