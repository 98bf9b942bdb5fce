//! The synthetic social graph both servers are loaded with, and the samplers the
//! workload draws users and ids from.
//!
//! Everything is a pure function of the seed, so the loader and every load-generator
//! connection agree on the data without sharing any state: user `u`'s set size is
//! one log-normal draw from an RNG seeded by `(seed, u)`, and its `j`-th member is a
//! hash of `(seed, u, j)` mapped into `1..=id_space`. A "hit" id for a check is then
//! member `j` for a random `j < size(u)`, found in O(1) without materialising the set.
//!
//! Set sizes: log-normal with median `size_median` (default 120) and shape
//! `size_sigma` (default 1.1), clamped to `[size_min, size_max]` (default 5..20 000).
//! With the defaults about 60 % of users follow 50–500 accounts, ~3 % follow more
//! than 1 000, and a long tail reaches the tens of thousands cap — the shape of
//! follow counts reported for Twitter and Weibo. Hash collisions inside a user's id
//! range make a set a few ids smaller than its drawn size; both servers see the same
//! duplicates, so it does not affect a comparison.
//!
//! What this does not model: correlation between who is hot and how many they follow,
//! and real id locality (ids here are spread uniformly over the id space).

use rand::rngs::StdRng as SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Zipf};

/// splitmix64 finaliser: a cheap, well-mixed hash of one `u64`.
#[must_use]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The shape of the dataset; both the loader and the runs must use the same values.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// Users `0..users`, each with one follow set.
    pub users: u64,
    /// Seed of every draw.
    pub seed: u64,
    /// Key prefix: user `u`'s set is `{prefix}{u}:following`.
    pub prefix: String,
    /// Member ids are drawn from `1..=id_space`.
    pub id_space: u64,
    /// Log-normal median of the set sizes.
    pub size_median: f64,
    /// Log-normal shape (standard deviation of the log).
    pub size_sigma: f64,
    /// Smallest set size.
    pub size_min: u64,
    /// Largest set size.
    pub size_max: u64,
}

impl Dataset {
    /// The key holding user `u`'s follow set.
    #[must_use]
    pub fn key(&self, u: u64) -> String {
        format!("{}{u}:following", self.prefix)
    }

    /// The key a load-on-miss op targets for user `u`: never written by the loader.
    #[must_use]
    pub fn cold_key(&self, u: u64) -> String {
        format!("{}{u}:cold", self.prefix)
    }

    /// How many ids user `u` follows (before duplicates collapse).
    #[must_use]
    pub fn size(&self, u: u64) -> u64 {
        let mut rng = SmallRng::seed_from_u64(mix64(self.seed ^ mix64(u)));
        let dist = LogNormal::new(self.size_median.ln(), self.size_sigma)
            .expect("size_sigma is validated to be finite and >= 0");
        let x: f64 = dist.sample(&mut rng);
        (x.round() as u64).clamp(self.size_min, self.size_max)
    }

    /// The `j`-th id user `u` follows.
    #[must_use]
    pub fn member(&self, u: u64, j: u64) -> u64 {
        let h = mix64(
            mix64(
                self.seed
                    .wrapping_add(u.wrapping_mul(0x2545_f491_4f6c_dd1d)),
            ) ^ j,
        );
        1 + h % self.id_space
    }

    /// Every id user `u` follows, in generation order (may hold duplicates).
    #[must_use]
    pub fn members(&self, u: u64) -> Vec<u64> {
        (0..self.size(u)).map(|j| self.member(u, j)).collect()
    }

    /// An id to check against user `u`'s set: a member with probability `hit_ratio`,
    /// otherwise a uniformly random id (almost always a non-member).
    pub fn probe_id<R: Rng>(&self, u: u64, hit_ratio: f64, rng: &mut R) -> u64 {
        if rng.gen_bool(hit_ratio.clamp(0.0, 1.0)) {
            let j = rng.gen_range(0..self.size(u));
            self.member(u, j)
        } else {
            rng.gen_range(1..=self.id_space)
        }
    }
}

/// How users are picked for each request.
#[derive(Clone, Debug)]
pub enum UserSampler {
    /// Every user equally likely.
    Uniform(u64),
    /// User `r - 1` has probability proportional to `1 / r^skew`.
    Zipf(Zipf<f64>),
}

impl UserSampler {
    /// A uniform sampler over `0..users`.
    #[must_use]
    pub fn uniform(users: u64) -> Self {
        UserSampler::Uniform(users.max(1))
    }

    /// A Zipf sampler over `0..users` with exponent `skew` (>= 0).
    ///
    /// # Errors
    ///
    /// If `skew` is negative or not finite.
    pub fn zipf(users: u64, skew: f64) -> anyhow::Result<Self> {
        let z = Zipf::new(users.max(1), skew)
            .map_err(|e| anyhow::anyhow!("invalid zipf skew {skew}: {e}"))?;
        Ok(UserSampler::Zipf(z))
    }

    /// A user index in `0..users`; with Zipf, index 0 is the hottest.
    pub fn sample<R: Rng>(&self, rng: &mut R) -> u64 {
        match self {
            UserSampler::Uniform(n) => rng.gen_range(0..*n),
            UserSampler::Zipf(z) => (z.sample(rng) as u64).saturating_sub(1),
        }
    }
}
