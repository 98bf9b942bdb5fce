//! Primality for table capacities (which are `u32`): deterministic Miller–Rabin.
//!
//! Bases 2, 7 and 61 decide primality exactly for every n < 4,759,123,141 (Jaeschke,
//! 1993), which covers all of `u32`. Small factors are tried first so most composites
//! cost a few divisions; a prime costs three modular exponentiations, well under a
//! microsecond, so the builder can search for the next prime on every build.

/// Small primes tried by division before Miller–Rabin.
const SMALL_PRIMES: [u32; 15] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47];

/// Whether `n` is prime. Exact for every `u32`.
#[must_use]
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    for p in SMALL_PRIMES {
        if n == p {
            return true;
        }
        if n.is_multiple_of(p) {
            return false;
        }
    }
    if n < 47 * 47 {
        return true;
    }
    let n = u64::from(n);
    // n - 1 = d * 2^s with d odd.
    let s = (n - 1).trailing_zeros();
    let d = (n - 1) >> s;
    'bases: for a in [2u64, 7, 61] {
        if a % n == 0 {
            continue;
        }
        let mut x = pow_mod(a, d, n);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..s {
            x = x * x % n;
            if x == n - 1 {
                continue 'bases;
            }
        }
        return false;
    }
    true
}

/// `base^exp mod m` for `m < 2^32` (so every product fits in a `u64`).
fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut acc = 1u64;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc * base % m;
        }
        base = base * base % m;
        exp >>= 1;
    }
    acc
}

/// The smallest prime `>= n`, or `None` if there is none below 2^32 (that is, when
/// `n` is above [`MAX_CAPACITY`](super::MAX_CAPACITY)).
#[must_use]
pub fn next_prime(n: u64) -> Option<u32> {
    if n <= 2 {
        return Some(2);
    }
    let mut c = u32::try_from(n).ok()? | 1;
    loop {
        if is_prime(c) {
            return Some(c);
        }
        c = c.checked_add(2)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by_division(n: u32) -> bool {
        n >= 2
            && (2..)
                .take_while(|d: &u64| d * d <= u64::from(n))
                .all(|d| u64::from(n) % d != 0)
    }

    #[test]
    fn matches_a_sieve_below_200_000() {
        let limit = 200_000usize;
        let mut sieve = vec![true; limit];
        sieve[0] = false;
        sieve[1] = false;
        for i in 2..limit {
            if sieve[i] {
                for j in (i * i..limit).step_by(i) {
                    sieve[j] = false;
                }
            }
        }
        for (n, &p) in sieve.iter().enumerate() {
            assert_eq!(is_prime(n as u32), p, "{n}");
        }
    }

    #[test]
    fn matches_division_on_large_numbers() {
        // A cheap LCG spreads the samples over all of u32.
        let mut x = 12345u64;
        for _ in 0..3000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let n = (x >> 32) as u32;
            assert_eq!(is_prime(n), by_division(n), "{n}");
        }
        for n in (u32::MAX - 2000)..=u32::MAX {
            assert_eq!(is_prime(n), by_division(n), "{n}");
        }
    }

    #[test]
    fn strong_pseudoprimes_are_composite() {
        // Strong pseudoprimes to base 2 (and some to several bases), and Carmichael
        // numbers; each must be rejected.
        for n in [
            2047u32,
            3277,
            4033,
            4681,
            8321,
            561,
            1105,
            1729,
            25_326_001,
            3_215_031_751,
            2_152_302_898,
        ] {
            assert!(!is_prime(n), "{n}");
        }
    }

    #[test]
    fn next_prime_values() {
        assert_eq!(next_prime(0), Some(2));
        assert_eq!(next_prime(2), Some(2));
        assert_eq!(next_prime(3), Some(3));
        assert_eq!(next_prime(4), Some(5));
        assert_eq!(next_prime(24), Some(29));
        assert_eq!(next_prime(26_667), Some(26_669));
        assert_eq!(next_prime(4_294_967_291), Some(4_294_967_291));
        assert_eq!(next_prime(4_294_967_292), None);
        assert_eq!(next_prime(u64::MAX), None);
    }
}
