//! The samplers' distributions, seeded so the checks are deterministic.

use rand::rngs::StdRng;
use rand::SeedableRng;
use relcache_bench::dataset::{Dataset, UserSampler};

#[test]
fn zipf_rank_one_is_two_to_the_skew_times_rank_two() {
    for skew in [0.8, 1.0, 1.2] {
        let sampler = UserSampler::zipf(1000, skew).unwrap();
        let mut rng = StdRng::seed_from_u64(42);
        let mut counts = [0u64; 3];
        let n = 400_000;
        for _ in 0..n {
            let u = sampler.sample(&mut rng);
            assert!(u < 1000, "user {u} out of range");
            if u < 3 {
                counts[u as usize] += 1;
            }
        }
        let ratio = counts[0] as f64 / counts[1] as f64;
        let want = 2f64.powf(skew);
        assert!(
            (ratio / want - 1.0).abs() < 0.05,
            "skew {skew}: rank1/rank2 = {ratio:.3}, want {want:.3} ±5% (counts {counts:?})"
        );
        let ratio3 = counts[0] as f64 / counts[2] as f64;
        let want3 = 3f64.powf(skew);
        assert!(
            (ratio3 / want3 - 1.0).abs() < 0.07,
            "skew {skew}: rank1/rank3 = {ratio3:.3}, want {want3:.3}"
        );
    }
}

#[test]
fn uniform_covers_every_user_evenly() {
    let sampler = UserSampler::uniform(10);
    let mut rng = StdRng::seed_from_u64(7);
    let mut counts = [0u64; 10];
    for _ in 0..100_000 {
        counts[sampler.sample(&mut rng) as usize] += 1;
    }
    for c in counts {
        assert!(
            (9_000..11_000).contains(&c),
            "uneven uniform counts {counts:?}"
        );
    }
}

fn dataset() -> Dataset {
    Dataset {
        users: 20_000,
        seed: 3,
        prefix: "t:".into(),
        id_space: 100_000_000,
        size_median: 120.0,
        size_sigma: 1.1,
        size_min: 5,
        size_max: 20_000,
    }
}

#[test]
fn set_sizes_are_mostly_hundreds_with_a_long_tail() {
    let d = dataset();
    let mut sizes: Vec<u64> = (0..d.users).map(|u| d.size(u)).collect();
    sizes.sort_unstable();
    let median = sizes[sizes.len() / 2];
    assert!((100..=140).contains(&median), "median set size {median}");
    let over_1000 = sizes.iter().filter(|&&s| s > 1000).count() as f64 / sizes.len() as f64;
    assert!(
        (0.01..0.06).contains(&over_1000),
        "{over_1000} of sets over 1000 ids"
    );
    assert!(
        *sizes.last().unwrap() > 5000,
        "no long tail: max {}",
        sizes.last().unwrap()
    );
    assert!(sizes[0] >= 5);
}

#[test]
fn dataset_is_a_pure_function_of_the_seed() {
    let d = dataset();
    assert_eq!(d.members(17), d.members(17));
    assert_eq!(d.members(17).len() as u64, d.size(17));
    let other = Dataset {
        seed: 4,
        ..dataset()
    };
    assert_ne!(d.members(17), other.members(17));
    assert!(d
        .members(17)
        .iter()
        .all(|&id| (1..=d.id_space).contains(&id)));
    // A hit probe is always a member.
    let mut rng = StdRng::seed_from_u64(1);
    let members = d.members(17);
    for _ in 0..100 {
        assert!(members.contains(&d.probe_id(17, 1.0, &mut rng)));
    }
}
