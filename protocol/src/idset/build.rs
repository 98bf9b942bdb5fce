//! Building tables from ids: [`Builder`], and [`rebuild`] / [`rebuild_with`] for a
//! table that is full or mostly deleted slots.

use std::collections::HashSet;

use super::prime::next_prime;
use super::table::{flag_for, read_u64, slot_off, write_u64, Header, Probe, TableRef};
use super::{
    probe_limit, table_len, DEFAULT_MAX_LOAD, DEFAULT_SEED, EMPTY, HEADER_LEN, MAX_CAPACITY,
    MIN_CAPACITY, RESEED_STEP, SEEDS_PER_CAPACITY, VERSION,
};

/// The ids do not fit in a table of at most [`MAX_CAPACITY`] slots (or, on a 32-bit
/// target, in memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{slots} ids (room included) need at least {needed} slots, more than an idset table can have ({MAX_CAPACITY})")]
pub struct TooLarge {
    /// Distinct ids to store in slots, plus the room asked for.
    pub slots: u64,
    /// The capacity they would need.
    pub needed: u64,
}

/// The capacity a table gets for `slot_ids` ids in slots at `max_load`: the smallest
/// prime `>= max(2, slot_ids + 1, ceil(slot_ids / max_load))`, the division done in
/// IEEE 754 double precision.
///
/// # Errors
///
/// [`TooLarge`] if that is above [`MAX_CAPACITY`].
pub fn capacity_for(slot_ids: u64, max_load: f64) -> Result<u32, TooLarge> {
    // `as u64` saturates, so an absurd quotient becomes u64::MAX and is refused below.
    let by_load = (slot_ids as f64 / max_load).ceil() as u64;
    let needed = by_load
        .max(slot_ids.saturating_add(1))
        .max(u64::from(MIN_CAPACITY));
    let too_large = TooLarge {
        slots: slot_ids,
        needed,
    };
    if needed > u64::from(MAX_CAPACITY) {
        return Err(too_large);
    }
    let capacity = next_prime(needed).ok_or(too_large)?;
    // A table must also fit in memory; this only bites on 32-bit targets.
    usize::try_from(table_len(capacity)).map_err(|_| too_large)?;
    Ok(capacity)
}

/// Builds tables. `Builder::new()` gives the default seed ([`DEFAULT_SEED`]), load
/// ([`DEFAULT_MAX_LOAD`]) and no extra room, so its output is a pure function of the
/// ids and their order (see `FORMAT.md` for the exact algorithm and test vectors).
///
/// ```
/// use relcache_protocol::idset::{validate, Builder};
///
/// let bytes = Builder::new().reserve(100).seed(42).build(&[7, 7, 9]);
/// let table = validate(&bytes).unwrap();
/// assert_eq!(table.len(), 2);
/// assert!(table.room_in_place() >= 100);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Builder {
    seed: u64,
    max_load: f64,
    reserve: u64,
}

impl Default for Builder {
    fn default() -> Self {
        Self::new()
    }
}

impl Builder {
    /// Default seed and load, no extra room.
    #[must_use]
    pub const fn new() -> Self {
        Self {
            seed: DEFAULT_SEED,
            max_load: DEFAULT_MAX_LOAD,
            reserve: 0,
        }
    }

    /// The hash seed to build with, written in the header. Any value works; a random
    /// one makes slot positions unpredictable to whoever chooses the ids. The header
    /// gets a later seed of the build's attempts (`seed + k * RESEED_STEP`) only if
    /// some id would land past [`MAX_PROBE`](super::MAX_PROBE) with this one.
    #[must_use]
    pub const fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The fraction of slots to fill, counting the reserved room.
    ///
    /// # Panics
    ///
    /// If `max_load` is not in `(0, 1]`.
    #[must_use]
    pub fn max_load(mut self, max_load: f64) -> Self {
        assert!(
            max_load > 0.0 && max_load <= 1.0,
            "idset max_load {max_load} is not in (0, 1]"
        );
        self.max_load = max_load;
        self
    }

    /// Sizes the table for `extra` more ids than it is built with. With the default
    /// load, at least `extra` ids can then be inserted in place before [`Full`].
    ///
    /// [`Full`]: super::Full
    #[must_use]
    pub const fn reserve(mut self, extra: usize) -> Self {
        self.reserve = extra as u64;
        self
    }

    /// The capacity this builder picks for `slot_ids` distinct ids other than 0 and
    /// `u64::MAX` (see [`capacity_for`]).
    ///
    /// # Errors
    ///
    /// [`TooLarge`] if it would exceed [`MAX_CAPACITY`].
    pub fn capacity_for(&self, slot_ids: u64) -> Result<u32, TooLarge> {
        capacity_for(slot_ids.saturating_add(self.reserve), self.max_load)
    }

    /// A table holding `ids` (duplicates collapse), inserted in slice order.
    ///
    /// # Panics
    ///
    /// If the table would need more than [`MAX_CAPACITY`] slots (billions of ids, or a
    /// huge [`reserve`](Self::reserve)); [`try_build`](Self::try_build) returns that
    /// as an error instead.
    #[must_use]
    pub fn build(&self, ids: &[u64]) -> Vec<u8> {
        self.try_build(ids).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`build`](Self::build), with an error instead of a panic.
    ///
    /// # Errors
    ///
    /// [`TooLarge`] if the table would need more than [`MAX_CAPACITY`] slots.
    pub fn try_build(&self, ids: &[u64]) -> Result<Vec<u8>, TooLarge> {
        self.build_from(ids.iter().copied())
    }

    /// [`build`](Self::build) from any iterator (collected first).
    ///
    /// # Panics
    ///
    /// As [`build`](Self::build).
    #[must_use]
    pub fn build_iter<I: IntoIterator<Item = u64>>(&self, ids: I) -> Vec<u8> {
        let ids: Vec<u64> = ids.into_iter().collect();
        self.build(&ids)
    }

    /// The layout of FORMAT.md §7, so other implementations can reproduce it
    /// exactly: the capacity is the one for the *distinct* ids, the layout the one you
    /// get by inserting them in order into that capacity, each within the first
    /// [`MAX_PROBE`](super::MAX_PROBE) slots of its probe sequence. An id that would land past them
    /// fails the attempt; the next tries another seed, [`SEEDS_PER_CAPACITY`] of them
    /// (`seed + k * RESEED_STEP`, wrapping), then the smallest prime at least twice
    /// the capacity, seeds again from `seed`.
    ///
    /// Usually one pass (two if duplicates change the capacity). Counting the
    /// distinct ids takes a set only when the first attempt fails, which takes ids
    /// laid out on purpose or a load near 1. With at most `MAX_PROBE` ids no attempt
    /// can fail (an id's first `MAX_PROBE` slots are distinct, and the others hold
    /// fewer); beyond that, ids that defeat four seeds at every capacity would have to
    /// be crafted per seed and capacity, so the doubling stops long before
    /// [`MAX_CAPACITY`] in practice.
    fn build_from<I: Iterator<Item = u64> + Clone>(&self, ids: I) -> Result<Vec<u8>, TooLarge> {
        let upper = ids.clone().filter(|&id| flag_for(id).is_none()).count() as u64;
        let guess = self.capacity_for(upper)?;
        let distinct = match fill(ids.clone(), self.seed, guess) {
            Filled::Done(bytes, count) => {
                if u64::from(count) == upper || self.capacity_for(u64::from(count))? == guess {
                    return Ok(bytes);
                }
                u64::from(count)
            }
            Filled::PastBound => {
                let mut seen = HashSet::new();
                ids.clone()
                    .filter(|&id| flag_for(id).is_none() && seen.insert(id))
                    .count() as u64
            }
        };
        let mut capacity = self.capacity_for(distinct)?;
        // The first attempt, (seed, guess), is the schedule's first when the guess was
        // right: it failed already.
        let mut skip_first = capacity == guess;
        loop {
            for k in u32::from(skip_first)..SEEDS_PER_CAPACITY {
                let seed = self
                    .seed
                    .wrapping_add(u64::from(k).wrapping_mul(RESEED_STEP));
                if let Filled::Done(bytes, _) = fill(ids.clone(), seed, capacity) {
                    return Ok(bytes);
                }
            }
            skip_first = false;
            capacity = doubled(capacity, distinct)?;
        }
    }
}

/// The smallest prime at least twice `capacity`: where a build goes when
/// [`SEEDS_PER_CAPACITY`] seeds could not place `slot_ids` ids within the bound.
fn doubled(capacity: u32, slot_ids: u64) -> Result<u32, TooLarge> {
    let needed = 2 * u64::from(capacity);
    next_prime(needed)
        .filter(|&c| usize::try_from(table_len(c)).is_ok())
        .ok_or(TooLarge {
            slots: slot_ids,
            needed,
        })
}

/// What [`fill`] made.
enum Filled {
    /// The table, and how many ids went into slots.
    Done(Vec<u8>, u32),
    /// An id would have landed past [`MAX_PROBE`](super::MAX_PROBE): no table.
    PastBound,
}

/// Inserts `ids` in order into a new table of `capacity` slots, which must exceed the
/// number of distinct ids other than 0 and `u64::MAX`, each into the first empty slot
/// among the first [`probe_limit`]`(capacity)` of its probe sequence.
fn fill<I: Iterator<Item = u64>>(ids: I, seed: u64, capacity: u32) -> Filled {
    // `capacity_for` and `attempts` checked that the length fits in usize.
    let mut bytes = vec![0u8; table_len(capacity) as usize];
    let (mut count, mut flags) = (0u32, 0u8);
    for id in ids {
        if let Some(bit) = flag_for(id) {
            flags |= bit;
            continue;
        }
        let mut probe = Probe::new(id, seed, capacity);
        let mut placed = false;
        for _ in 0..probe_limit(capacity) {
            let off = slot_off(probe.slot());
            let v = read_u64(&bytes, off);
            if v == EMPTY {
                write_u64(&mut bytes, off, id);
                count += 1;
                placed = true;
                break;
            }
            if v == id {
                placed = true;
                break;
            }
            probe.advance();
        }
        // Below MAX_PROBE slots the walk covers the whole table (a prime capacity's
        // sequence visits every slot), so only a table larger than that gets here.
        if !placed {
            return Filled::PastBound;
        }
    }
    let header = Header {
        version: VERSION,
        flags,
        seed,
        capacity,
        count,
        deleted: 0,
    };
    bytes[..HEADER_LEN].copy_from_slice(&header.to_bytes());
    Filled::Done(bytes, count)
}

/// A fresh table with the members of `table`: same seed, default load, no deleted
/// slots, sized for its members plus `reserve` more (see [`rebuild_with`]).
///
/// It shrinks a table whose load is mostly deleted slots. Even with `reserve` 1, the
/// new table takes about `len / 5` in-place inserts (load 0.75 up to 0.9) before it
/// is full again, so rebuilding costs amortized O(1) per insert.
///
/// # Errors
///
/// [`TooLarge`] if the table would need more than [`MAX_CAPACITY`] slots.
pub fn rebuild(table: &TableRef<'_>, reserve: usize) -> Result<Vec<u8>, TooLarge> {
    rebuild_with(table, &[], reserve)
}

/// A fresh table with the members of `table` (in slot order) followed by `more`:
/// built as FORMAT.md §7 says, from the table's own seed, at the default load, with
/// room for `reserve` more ids.
///
/// Use it when [`TableMut::insert`](super::TableMut::insert) returns
/// [`Full`](super::Full), with the id being inserted in `more`: a build always places
/// every id (trying other seeds or a larger capacity if it must), whereas inserting
/// into a plain rebuild could meet `Full` again for an id laid out to collide.
///
/// # Errors
///
/// [`TooLarge`] if the table would need more than [`MAX_CAPACITY`] slots.
pub fn rebuild_with(
    table: &TableRef<'_>,
    more: &[u64],
    reserve: usize,
) -> Result<Vec<u8>, TooLarge> {
    Builder::new()
        .seed(table.seed())
        .reserve(reserve)
        .build_from(table.iter().chain(more.iter().copied()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities() {
        assert_eq!(capacity_for(0, 0.75), Ok(2));
        assert_eq!(capacity_for(1, 0.75), Ok(2));
        assert_eq!(capacity_for(2, 0.75), Ok(3));
        assert_eq!(capacity_for(3, 0.75), Ok(5));
        assert_eq!(capacity_for(3, 1.0), Ok(5));
        assert_eq!(capacity_for(4, 1.0), Ok(5));
        assert_eq!(capacity_for(20_000, 0.75), Ok(26_669));
        assert_eq!(capacity_for(3_221_225_468, 0.75), Ok(MAX_CAPACITY));
        assert!(capacity_for(3_221_225_469, 0.75).is_err());
        assert!(capacity_for(u64::MAX, 0.75).is_err());
        assert!(capacity_for(10, 1e-300).is_err());
    }

    #[test]
    fn duplicates_do_not_inflate_capacity() {
        let ids: Vec<u64> = (1..=4).cycle().take(40).collect();
        let bytes = Builder::new().build(&ids);
        assert_eq!(bytes, Builder::new().build(&[1, 2, 3, 4]));
    }

    #[test]
    #[should_panic(expected = "not in (0, 1]")]
    fn max_load_must_be_a_fraction() {
        let _ = Builder::new().max_load(1.5);
    }

    #[test]
    fn a_load_near_one_moves_to_a_larger_capacity() {
        // 1,008 ids in 1,009 slots: every seed leaves ids past the bound, so the build
        // doubles the capacity and starts again from the seed asked for (the Python
        // builder of FORMAT.md §11 gives the same).
        let ids: Vec<u64> = (1..=1008).collect();
        let bytes = Builder::new().max_load(1.0).build(&ids);
        let header = Header::parse(&bytes).unwrap();
        assert_eq!((header.capacity, header.seed), (2027, DEFAULT_SEED));
        // At most MAX_PROBE ids always fit in one attempt, at any load.
        let few: Vec<u64> = (1..=u64::from(super::super::MAX_PROBE)).collect();
        let bytes = Builder::new().max_load(1.0).seed(5).build(&few);
        let header = Header::parse(&bytes).unwrap();
        assert_eq!((header.capacity, header.seed), (131, 5));
    }

    #[test]
    fn doubling_past_the_largest_capacity_is_an_error() {
        assert_eq!(doubled(1009, 7), Ok(2027));
        assert!(doubled(MAX_CAPACITY / 2 + 1, 7).is_err());
    }

    #[test]
    fn reserve_too_large_is_an_error() {
        assert!(Builder::new().reserve(usize::MAX).try_build(&[1]).is_err());
    }
}
