//! Building tables from ids: [`Builder`], and [`rebuild`] for a table that is full or
//! mostly deleted slots.

use super::prime::next_prime;
use super::table::{flag_for, read_u64, slot_off, write_u64, Header, Probe, TableRef};
use super::{
    table_len, DEFAULT_MAX_LOAD, DEFAULT_SEED, EMPTY, HEADER_LEN, MAX_CAPACITY, MIN_CAPACITY,
    VERSION,
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

    /// The hash seed to write in the header. Any value works; a random one makes
    /// slot positions unpredictable to whoever chooses the ids.
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

    /// Two passes over `ids` (three if it has duplicates that change the capacity): the
    /// capacity is the one for the *distinct* ids, and the layout is the one you get by
    /// inserting them in order into that capacity, so other implementations can
    /// reproduce it exactly.
    fn build_from<I: Iterator<Item = u64> + Clone>(&self, ids: I) -> Result<Vec<u8>, TooLarge> {
        let upper = ids.clone().filter(|&id| flag_for(id).is_none()).count() as u64;
        let capacity = self.capacity_for(upper)?;
        let (bytes, count) = fill(ids.clone(), self.seed, capacity);
        if u64::from(count) < upper {
            let exact = self.capacity_for(u64::from(count))?;
            if exact != capacity {
                return Ok(fill(ids, self.seed, exact).0);
            }
        }
        Ok(bytes)
    }
}

/// Inserts `ids` in order into a new table of `capacity` slots, which must exceed the
/// number of distinct ids other than 0 and `u64::MAX`. Returns the table and how many
/// ids went into slots.
fn fill<I: Iterator<Item = u64>>(ids: I, seed: u64, capacity: u32) -> (Vec<u8>, u32) {
    // `capacity_for` checked that the length fits in usize.
    let mut bytes = vec![0u8; table_len(capacity) as usize];
    let (mut count, mut flags) = (0u32, 0u8);
    for id in ids {
        if let Some(bit) = flag_for(id) {
            flags |= bit;
            continue;
        }
        let mut probe = Probe::new(id, seed, capacity);
        let mut placed = false;
        for _ in 0..capacity {
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
        // Capacity exceeds the distinct ids, and a prime capacity's probe sequence
        // visits every slot, so an empty slot is always found.
        assert!(
            placed,
            "idset builder: no empty slot in capacity {capacity}"
        );
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
    (bytes, count)
}

/// A fresh table with the members of `table`: same seed, default load, no deleted
/// slots, sized for its members plus `reserve` more.
///
/// Use it when [`TableMut::insert`](super::TableMut::insert) returns
/// [`Full`](super::Full). It also shrinks a table whose load is mostly deleted slots.
/// Even with `reserve` 1, the new table takes about `len / 5` in-place inserts (load
/// 0.75 up to 0.9) before it is full again, so rebuilding on `Full` costs amortized
/// O(1) per insert.
///
/// # Errors
///
/// [`TooLarge`] if the table would need more than [`MAX_CAPACITY`] slots.
pub fn rebuild(table: &TableRef<'_>, reserve: usize) -> Result<Vec<u8>, TooLarge> {
    Builder::new()
        .seed(table.seed())
        .reserve(reserve)
        .build_from(table.iter())
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
    fn reserve_too_large_is_an_error() {
        assert!(Builder::new().reserve(usize::MAX).try_build(&[1]).is_err());
    }
}
