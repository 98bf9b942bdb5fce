//! Micro-benchmarks of the idset table: build, validate, membership and in-place
//! update, for follow sets of 200, 2,000 and 20,000 ids (ids random below 2^40, like
//! auto-increment user ids of a large site; default seed and load).
//!
//! Each iteration takes the next of several different inputs (32 sets of 200 ids, 20
//! of 2,000, 2 of 20,000: about 0.7 MB of ids and tables in all, so they stay in L2).
//! With one input repeated, the branch predictor learns its exact sequence of "slot
//! empty? / id found?" outcomes and the 200- and 2,000-id figures come out about three
//! times better than any real table gets.
//!
//! What this does not measure: RESP parsing and the network; the server's keyspace
//! (shard lock, hashing the key, copying the value); cold memory. A server with
//! millions of keys mostly pays a cache miss or two per lookup on top of these
//! figures. "Miss" below means an id absent from the set, not a cache miss.
//!
//! Run: `cargo bench -p relcache-protocol --bench idset` (add `-- --quick` for a short
//! run).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use relcache_protocol::idset::{
    check, mix, validate, Builder, Check, TableMut, TableRef, MASK_IDS,
};

const SIZES: [usize; 3] = [200, 2_000, 20_000];
/// Remove + insert pairs per iteration of the `update` benchmarks.
const UPDATES: usize = 1_000;

/// splitmix64, so the inputs are the same on every run without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    fn id(&mut self) -> u64 {
        1 + (self.next() >> 24)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// How many different inputs of `n` ids a benchmark cycles through.
fn variants(n: usize) -> usize {
    (40_000 / n).clamp(2, 32)
}

/// `variants(n)` different sets of `n` random ids.
fn id_sets(n: usize) -> Vec<Vec<u64>> {
    let mut rng = Rng(n as u64);
    (0..variants(n))
        .map(|_| (0..n).map(|_| rng.id()).collect())
        .collect()
}

/// Cycles through `0..len`, one step per call.
fn cycle(len: usize) -> impl FnMut() -> usize {
    let mut i = 0;
    move || {
        i = (i + 1) % len;
        i
    }
}

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("build");
    for n in SIZES {
        let sets = id_sets(n);
        let mut next = cycle(sets.len());
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::from_parameter(format!("{n}ids")), |b| {
            b.iter(|| Builder::new().build(black_box(&sets[next()])));
        });
    }
    group.finish();
}

fn validate_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate");
    for n in SIZES {
        let tables: Vec<Vec<u8>> = id_sets(n)
            .iter()
            .map(|ids| Builder::new().build(ids))
            .collect();
        let mut next = cycle(tables.len());
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::from_parameter(format!("{n}ids")), |b| {
            b.iter(|| validate(black_box(&tables[next()])).unwrap().len());
        });
        // What a client's SET of a prebuilt table pays by default.
        group.bench_function(BenchmarkId::from_parameter(format!("{n}ids-sample")), |b| {
            b.iter(|| {
                check(black_box(&tables[next()]), Check::Sample)
                    .unwrap()
                    .len()
            });
        });
    }
    group.finish();
}

/// Every member of a table once, in random order (`hit`), or as many ids that are not
/// members (`miss`): lookups spread over the whole table, as a server's would.
fn contains(c: &mut Criterion) {
    let mut group = c.benchmark_group("contains");
    for n in SIZES {
        let mut rng = Rng(7);
        let mut cases = Vec::new();
        for members in id_sets(n) {
            let bytes = Builder::new().build(&members);
            let table = TableRef::open(&bytes).unwrap();
            let mut hits = members.clone();
            for i in (1..n).rev() {
                hits.swap(i, rng.below(i + 1));
            }
            let misses: Vec<u64> = (0..n)
                .map(|_| rng.id())
                .filter(|&id| !table.contains(id))
                .collect();
            assert_eq!(
                misses.len(),
                n,
                "a random id hit the set; pick another rng seed"
            );
            cases.push((bytes, hits, misses));
        }
        group.throughput(Throughput::Elements(n as u64));
        for kind in ["hit", "miss"] {
            let mut next = cycle(cases.len());
            group.bench_function(BenchmarkId::new(format!("{n}ids"), kind), |b| {
                b.iter(|| {
                    let (bytes, hits, misses) = &cases[next()];
                    let probes = if kind == "hit" { hits } else { misses };
                    // Open per batch, as the server does per command.
                    let table = TableRef::open(black_box(bytes)).unwrap();
                    probes.iter().filter(|&&id| table.contains(id)).count()
                });
            });
        }
    }
    group.finish();
}

/// What IDSET.MEXISTSBIN does: 100 ids, half of them members, in random order, looked
/// up in one table of 2,000 ids a mask of 64 at a time, the reply a bitmap, after
/// `TableRef::prefetch_for`, as the server's `TableRef::contains_masks` does. Each
/// of `warm` and `cold` comes in four: as the server does it, `-one-by-one` (each
/// id on its own with `TableRef::contains`, the server's loop until 2e94e90, which
/// earlier figures under the plain names measured), and both `-no-prefetch`.
/// `warm`: one of 8 such
/// tables (they stay in L2); `cold`: one of 16,000 (350 MB, past the last-level
/// cache of the hosts measured), so each batch starts with its table in memory, as
/// a server's would under many users. Each batch's own 100 ids are out of cache
/// too in `cold`, where a server's are in the request it just read: a little more
/// time on both sides of the pair.
fn batch(c: &mut Criterion) {
    const BATCH: usize = 100;
    const N: usize = 2_000;
    let mut group = c.benchmark_group("batch");
    group.throughput(Throughput::Elements(BATCH as u64));
    let mut kinds = Vec::new();
    for (heat, tables) in [("warm", 8), ("cold", 16_000)] {
        for (prefetch, p) in [(true, ""), (false, "-no-prefetch")] {
            for (masked, m) in [(true, ""), (false, "-one-by-one")] {
                kinds.push((format!("{heat}{m}{p}"), tables, prefetch, masked));
            }
        }
    }
    for (kind, tables, prefetch, masked) in kinds {
        let mut rng = Rng(13);
        let cases: Vec<(Vec<u8>, Vec<u64>)> = (0..tables)
            .map(|_| {
                let members: Vec<u64> = (0..N).map(|_| rng.id()).collect();
                let mut ids: Vec<u64> = (0..BATCH)
                    .map(|i| {
                        if i % 2 == 0 {
                            members[rng.below(N)]
                        } else {
                            rng.id()
                        }
                    })
                    .collect();
                for i in (1..BATCH).rev() {
                    ids.swap(i, rng.below(i + 1));
                }
                (Builder::new().build(&members), ids)
            })
            .collect();
        let mut next = cycle(cases.len());
        group.bench_function(BenchmarkId::new(format!("{BATCH}of{N}"), kind), |b| {
            b.iter(|| {
                let (bytes, ids) = &cases[next()];
                let table = TableRef::open(black_box(bytes)).unwrap();
                if prefetch {
                    table.prefetch_for(ids.len());
                }
                let mut bitmap = [0u8; BATCH.div_ceil(8)];
                if masked {
                    // What `contains_masks` does, with its prefetch left to the flag.
                    for (out, chunk) in bitmap.chunks_mut(8).zip(ids.chunks(MASK_IDS)) {
                        let mask = table.contains_mask(chunk);
                        out.copy_from_slice(&mask.to_le_bytes()[..out.len()]);
                    }
                } else {
                    for (i, &id) in ids.iter().enumerate() {
                        bitmap[i / 8] |= u8::from(table.contains(id)) << (i % 8);
                    }
                }
                bitmap
            });
        });
    }
    group.finish();
}

/// A remove and a re-insert of a member, in place: the SREM + SADD path without the
/// server. The re-insert reuses the tombstone the remove left.
fn update(c: &mut Criterion) {
    let mut group = c.benchmark_group("update");
    group.throughput(Throughput::Elements(UPDATES as u64));
    for n in SIZES {
        let mut rng = Rng(11);
        let mut cases: Vec<(Vec<u8>, Vec<u64>)> = id_sets(n)
            .into_iter()
            .map(|members| {
                let picks = (0..UPDATES).map(|_| members[rng.below(n)]).collect();
                (Builder::new().build(&members), picks)
            })
            .collect();
        let mut next = cycle(cases.len());
        group.bench_function(BenchmarkId::new(format!("{n}ids"), "remove+insert"), |b| {
            b.iter(|| {
                let (bytes, picks) = &mut cases[next()];
                let mut table = TableMut::open(black_box(bytes)).unwrap();
                for &id in picks.iter() {
                    table.remove(id);
                    table.insert(id).unwrap();
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, build, validate_bench, contains, batch, update);
criterion_main!(benches);
