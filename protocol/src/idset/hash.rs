//! The table's hash and probe sequence: fixed, fully specified, and the same in every
//! language that builds tables (see `FORMAT.md`). Nothing here is randomized per
//! process; the only variation is the seed stored in the table's header.

/// The splitmix64 finalizer: two xor-shift-multiply rounds and a final xor-shift.
///
/// A bijection on `u64` (so distinct ids never collide in the full 64-bit hash), and
/// every input bit affects every output bit.
#[inline]
#[must_use]
pub const fn mix(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of `id` in a table with this `seed`: `mix(id ^ seed)`.
#[inline]
#[must_use]
pub const fn hash(id: u64, seed: u64) -> u64 {
    mix(id ^ seed)
}

/// Lemire's fastrange: maps `x` onto `0..n` as the high 64 bits of the 128-bit
/// product `x * n`, without a division. Returns 0 when `n` is 0.
#[inline]
#[must_use]
pub const fn fastrange(x: u64, n: u64) -> u64 {
    ((x as u128 * n as u128) >> 64) as u64
}

/// The first slot and the step of the probe sequence for hash `h` in a table of
/// `capacity` slots.
///
/// `start = fastrange(h, capacity)`, `step = 1 + fastrange(rotl(h, 32), capacity - 1)`;
/// so `start < capacity` and `1 <= step < capacity` (step is 1 when capacity is 2).
/// Slot `k` of the sequence is `(start + k * step) mod capacity`, computed as
/// `slot += step; if slot >= capacity { slot -= capacity }`. With a prime capacity
/// every step is coprime with it and the first `capacity` slots of the sequence are
/// all the slots. `capacity` must be at least 2 for that to hold; smaller values still
/// return in-range numbers (start 0, step 1) rather than panicking.
#[inline]
#[must_use]
pub const fn start_and_step(h: u64, capacity: u32) -> (u32, u32) {
    let cap = capacity as u64;
    let start = fastrange(h, cap);
    let step = 1 + fastrange(h.rotate_left(32), cap.saturating_sub(1));
    (start as u32, step as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // splitmix64's reference generator, seeded with 0, returns mix(state) after
        // adding the golden ratio each call; its first outputs are well known.
        let mut state = 0u64;
        let mut next = || {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix(state)
        };
        assert_eq!(next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(next(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(next(), 0x06c4_5d18_8009_454f);
        assert_eq!(mix(0), 0);
    }

    #[test]
    fn fastrange_bounds() {
        assert_eq!(fastrange(u64::MAX, 0), 0);
        assert_eq!(fastrange(u64::MAX, 1), 0);
        assert_eq!(fastrange(u64::MAX, 7), 6);
        assert_eq!(fastrange(0, 7), 0);
        assert_eq!(fastrange(1 << 63, 10), 5);
    }

    #[test]
    fn start_and_step_in_range() {
        for cap in [2u32, 3, 5, 7, 11, 101, 4_294_967_291] {
            for id in [0u64, 1, 2, 42, u64::MAX, 1 << 63, 0xdead_beef] {
                let (start, step) = start_and_step(hash(id, 7), cap);
                assert!(start < cap);
                assert!(step >= 1 && step < cap, "cap {cap} step {step}");
            }
        }
        assert_eq!(start_and_step(u64::MAX, 2).1, 1);
        assert_eq!(start_and_step(u64::MAX, 1), (0, 1));
        assert_eq!(start_and_step(u64::MAX, 0), (0, 1));
    }
}
