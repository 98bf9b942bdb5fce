//! The load generator: connections that each keep `pipeline` ops in flight, picking
//! op types by weight, users by the sampler and ids from the dataset.
//!
//! Each connection runs batches: it writes up to `pipeline` ops (an op is one or
//! more commands), then reads every reply, then starts the next batch, like
//! `redis-benchmark -P`. A load-on-miss op whose check finds the key missing
//! writes the set in the next batch, and its latency covers both round trips. What
//! this does not model: open-loop arrivals (it is closed-loop, so a slow server sees
//! fewer requests, and coordinated omission hides some of its tail), and networks
//! (loopback only when run by compare.sh).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use bytes::BytesMut;
use hdrhistogram::Histogram;
use rand::distributions::WeightedIndex;
use rand::rngs::StdRng as SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::Distribution;
use relcache_protocol::idset::Builder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::cli::{Dist, RedisType, RunArgs, Target};
use crate::dataset::{mix64, Dataset, UserSampler};
use crate::report::{OpStats, RunReport};
use crate::wire::{encode, error_text, scan_reply, write_bulk_u64, Conn, Reply};

/// The kinds of op a workload mixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum OpKind {
    /// Does A follow X? (IDSET.EXISTS / SISMEMBER / HGET)
    Check,
    /// Which of these `batch` ids does A follow? (IDSET.MEXISTSBIN / SMISMEMBER / HMGET)
    Batch,
    /// Four-state relation: A follows B? and B follows A? (two commands)
    Relation,
    /// Load-on-miss: check a cold key, and on a miss write the whole set.
    Load,
    /// A follows X (IDSET.ADD XX / SADD / HSET).
    Follow,
    /// A unfollows X (IDSET.REM / SREM / HDEL).
    Unfollow,
    /// Which of these keys contain X? (IDSET.WHICH / pipelined SISMEMBERs)
    Which,
}

/// Every kind, in report order.
pub const OP_KINDS: [OpKind; 7] = [
    OpKind::Check,
    OpKind::Batch,
    OpKind::Relation,
    OpKind::Load,
    OpKind::Follow,
    OpKind::Unfollow,
    OpKind::Which,
];

impl OpKind {
    /// The name used in `--mix` and reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Check => "check",
            OpKind::Batch => "batch",
            OpKind::Relation => "relation",
            OpKind::Load => "load",
            OpKind::Follow => "follow",
            OpKind::Unfollow => "unfollow",
            OpKind::Which => "which",
        }
    }

    fn index(self) -> usize {
        OP_KINDS.iter().position(|&k| k == self).unwrap_or(0)
    }
}

/// Parses `check=60,batch=20,...` into weights; unnamed kinds weigh 0.
///
/// # Errors
///
/// On an unknown name, a bad number, or all weights 0.
pub fn parse_mix(mix: &str) -> anyhow::Result<Vec<(OpKind, u32)>> {
    let mut out = Vec::new();
    for part in mix.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, w) = part
            .split_once('=')
            .with_context(|| format!("mix entry {part:?} is not name=weight"))?;
        let kind = OP_KINDS
            .iter()
            .copied()
            .find(|k| k.name() == name.trim())
            .with_context(|| {
                format!("unknown op {name:?} in --mix (check, batch, relation, load, follow, unfollow, which)")
            })?;
        let w: u32 = w
            .trim()
            .parse()
            .with_context(|| format!("bad weight in {part:?}"))?;
        out.push((kind, w));
    }
    if out.iter().all(|&(_, w)| w == 0) {
        bail!("--mix {mix:?} has no op with a weight > 0");
    }
    Ok(out)
}

/// Everything the connections share.
struct Plan {
    target: Target,
    redis_type: RedisType,
    data: Dataset,
    sampler: UserSampler,
    kinds: Vec<OpKind>,
    weights: WeightedIndex<u32>,
    pipeline: usize,
    batch: usize,
    which_keys: usize,
    hit_ratio: f64,
    decimal: bool,
    miss_ttl_ms: u64,
    always_miss: bool,
    warm_end: Instant,
    /// Time mode: stop issuing at this instant.
    deadline: Option<Instant>,
    /// Request mode: measured ops still to issue.
    budget: Option<AtomicU64>,
    done: AtomicU64,
    errors: AtomicU64,
    stop: AtomicBool,
}

impl Plan {
    /// Claims up to `want` measured ops from the budget.
    fn claim(&self, want: u64) -> u64 {
        match &self.budget {
            None => want,
            Some(b) => {
                let prev = b
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                        Some(r - r.min(want))
                    })
                    .unwrap_or(0);
                prev.min(want)
            }
        }
    }
}

/// One op waiting for its replies.
struct Pending {
    kind: OpKind,
    start: Instant,
    replies: usize,
    measured: bool,
    /// Load-on-miss: the user whose cold key was checked, if this is the check.
    load_user: Option<(u64, String)>,
    errors: u64,
}

/// What one connection measured.
struct WorkerStats {
    hists: Vec<Histogram<u64>>,
    stats: Vec<OpStats>,
    error_kinds: BTreeMap<String, u64>,
    load_misses: u64,
    last_done: Option<Instant>,
}

fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

struct Worker {
    plan: Arc<Plan>,
    id: usize,
    seq: u64,
    rng: SmallRng,
    stream: TcpStream,
    out: BytesMut,
    inbuf: BytesMut,
    scratch: Vec<u8>,
    stats: WorkerStats,
}

impl Worker {
    fn key(&self, u: u64) -> String {
        self.plan.data.key(u)
    }

    /// Encodes one new op into `out`.
    fn issue(&mut self, kind: OpKind, measured: bool, start: Instant) -> Pending {
        let plan = Arc::clone(&self.plan);
        let redis = plan.target == Target::Redis;
        let hash = plan.redis_type == RedisType::Hash;
        let u = plan.sampler.sample(&mut self.rng);
        let key = self.key(u);
        let mut b = itoa::Buffer::new();
        let mut pending = Pending {
            kind,
            start,
            replies: 1,
            measured,
            load_user: None,
            errors: 0,
        };
        match kind {
            OpKind::Check => {
                let id = plan.data.probe_id(u, plan.hit_ratio, &mut self.rng);
                let cmd: &[u8] = match (redis, hash) {
                    (false, _) => b"IDSET.EXISTS",
                    (true, false) => b"SISMEMBER",
                    (true, true) => b"HGET",
                };
                encode(
                    &mut self.out,
                    &[cmd, key.as_bytes(), b.format(id).as_bytes()],
                );
            }
            OpKind::Batch => {
                let n = plan.batch;
                if !redis && !plan.decimal {
                    self.scratch.clear();
                    for _ in 0..n {
                        let id = plan.data.probe_id(u, plan.hit_ratio, &mut self.rng);
                        self.scratch.extend_from_slice(&id.to_le_bytes());
                    }
                    encode(
                        &mut self.out,
                        &[b"IDSET.MEXISTSBIN", key.as_bytes(), &self.scratch],
                    );
                } else {
                    let cmd: &[u8] = match (redis, hash) {
                        (false, _) => b"IDSET.MEXISTS",
                        (true, false) => b"SMISMEMBER",
                        (true, true) => b"HMGET",
                    };
                    relcache_protocol::resp::write_array_header(&mut self.out, n + 2);
                    relcache_protocol::resp::write_bulk(&mut self.out, cmd);
                    relcache_protocol::resp::write_bulk(&mut self.out, key.as_bytes());
                    for _ in 0..n {
                        let id = plan.data.probe_id(u, plan.hit_ratio, &mut self.rng);
                        write_bulk_u64(&mut self.out, id);
                    }
                }
            }
            OpKind::Relation => {
                // User u's id is u + 1: does u follow v, and v follow u?
                let v = plan.sampler.sample(&mut self.rng);
                let cmd: &[u8] = match (redis, hash) {
                    (false, _) => b"IDSET.EXISTS",
                    (true, false) => b"SISMEMBER",
                    (true, true) => b"HGET",
                };
                let kv = self.key(v);
                encode(
                    &mut self.out,
                    &[cmd, key.as_bytes(), b.format(v + 1).as_bytes()],
                );
                encode(
                    &mut self.out,
                    &[cmd, kv.as_bytes(), b.format(u + 1).as_bytes()],
                );
                pending.replies = 2;
            }
            OpKind::Load => {
                let cold = if plan.always_miss {
                    self.seq += 1;
                    format!("{}:{}:{}", plan.data.cold_key(u), self.id, self.seq)
                } else {
                    plan.data.cold_key(u)
                };
                let cmd: &[u8] = if redis { b"EXISTS" } else { b"IDSET.CARD" };
                encode(&mut self.out, &[cmd, cold.as_bytes()]);
                pending.load_user = Some((u, cold));
            }
            OpKind::Follow | OpKind::Unfollow => {
                let id = if kind == OpKind::Follow {
                    self.rng.gen_range(1..=plan.data.id_space)
                } else {
                    plan.data.probe_id(u, 1.0, &mut self.rng)
                };
                let id = b.format(id);
                match (redis, hash, kind) {
                    (false, _, OpKind::Follow) => encode(
                        &mut self.out,
                        &[b"IDSET.ADD", key.as_bytes(), b"XX", id.as_bytes()],
                    ),
                    (false, _, _) => encode(
                        &mut self.out,
                        &[b"IDSET.REM", key.as_bytes(), id.as_bytes()],
                    ),
                    (true, false, OpKind::Follow) => {
                        encode(&mut self.out, &[b"SADD", key.as_bytes(), id.as_bytes()])
                    }
                    (true, false, _) => {
                        encode(&mut self.out, &[b"SREM", key.as_bytes(), id.as_bytes()])
                    }
                    (true, true, OpKind::Follow) => encode(
                        &mut self.out,
                        &[b"HSET", key.as_bytes(), id.as_bytes(), b"1"],
                    ),
                    (true, true, _) => {
                        encode(&mut self.out, &[b"HDEL", key.as_bytes(), id.as_bytes()])
                    }
                }
            }
            OpKind::Which => {
                let id = plan.data.probe_id(u, plan.hit_ratio, &mut self.rng);
                let mut keys = vec![key];
                for _ in 1..plan.which_keys.max(1) {
                    let v = plan.sampler.sample(&mut self.rng);
                    keys.push(self.key(v));
                }
                let id = b.format(id);
                if redis {
                    let cmd: &[u8] = if hash { b"HEXISTS" } else { b"SISMEMBER" };
                    for k in &keys {
                        encode(&mut self.out, &[cmd, k.as_bytes(), id.as_bytes()]);
                    }
                    pending.replies = keys.len();
                } else {
                    let mut args: Vec<&[u8]> = vec![b"IDSET.WHICH", id.as_bytes()];
                    args.extend(keys.iter().map(|k| k.as_bytes()));
                    encode(&mut self.out, &args);
                }
            }
        }
        pending
    }

    /// Encodes the write half of a load-on-miss op for user `u`.
    fn issue_load_write(&mut self, u: u64, cold: &str, mut pending: Pending) -> Pending {
        let plan = Arc::clone(&self.plan);
        let ids = plan.data.members(u);
        let mut b = itoa::Buffer::new();
        let ttl = b.format(plan.miss_ttl_ms.max(1)).to_owned();
        pending.load_user = None;
        if plan.target == Target::Relcache {
            let table = Builder::new().build(&ids);
            encode(
                &mut self.out,
                &[b"SET", cold.as_bytes(), &table, b"PX", ttl.as_bytes()],
            );
            pending.replies = 1;
        } else {
            let hash = plan.redis_type == RedisType::Hash;
            let per = if hash { 2 } else { 1 };
            relcache_protocol::resp::write_array_header(&mut self.out, 2 + ids.len() * per);
            relcache_protocol::resp::write_bulk(
                &mut self.out,
                if hash { b"HSET" } else { b"SADD" },
            );
            relcache_protocol::resp::write_bulk(&mut self.out, cold.as_bytes());
            for id in ids {
                write_bulk_u64(&mut self.out, id);
                if hash {
                    relcache_protocol::resp::write_bulk(&mut self.out, b"1");
                }
            }
            encode(
                &mut self.out,
                &[b"PEXPIRE", cold.as_bytes(), ttl.as_bytes()],
            );
            pending.replies = 2;
        }
        pending
    }

    fn ids_of(&self, kind: OpKind) -> u64 {
        match kind {
            OpKind::Check => 1,
            OpKind::Batch => self.plan.batch as u64,
            OpKind::Relation => 2,
            OpKind::Which => self.plan.which_keys.max(1) as u64,
            OpKind::Load | OpKind::Follow | OpKind::Unfollow => 0,
        }
    }

    /// Reads one reply; returns its kind.
    async fn read_reply(&mut self) -> anyhow::Result<Reply> {
        loop {
            match scan_reply(&self.inbuf).map_err(|e| anyhow::anyhow!("bad reply: {e}"))? {
                Some((r, len)) => {
                    if r == Reply::Error {
                        let mut text = error_text(&self.inbuf, len);
                        text.truncate(120);
                        *self.stats.error_kinds.entry(text).or_insert(0) += 1;
                    }
                    let _ = self.inbuf.split_to(len);
                    return Ok(r);
                }
                None => {
                    if self.stream.read_buf(&mut self.inbuf).await? == 0 {
                        bail!("server closed the connection");
                    }
                }
            }
        }
    }

    async fn run(mut self) -> anyhow::Result<WorkerStats> {
        let plan = Arc::clone(&self.plan);
        let mut batch: Vec<Pending> = Vec::with_capacity(plan.pipeline);
        let mut followups: Vec<(u64, String, Pending)> = Vec::new();
        loop {
            let now = Instant::now();
            let measuring = now >= plan.warm_end;
            let mut room = plan.pipeline.saturating_sub(followups.len()) as u64;
            if plan.stop.load(Ordering::Relaxed) || plan.deadline.is_some_and(|d| now >= d) {
                room = 0;
            } else if measuring {
                room = plan.claim(room);
            }
            if room == 0 && followups.is_empty() {
                break;
            }
            for (u, cold, p) in std::mem::take(&mut followups) {
                let p = self.issue_load_write(u, &cold, p);
                batch.push(p);
            }
            for _ in 0..room {
                let kind = plan.kinds[plan.weights.sample(&mut self.rng)];
                let p = self.issue(kind, measuring, now);
                batch.push(p);
            }
            self.stream.write_all(&self.out).await?;
            self.out.clear();
            let mut done = 0u64;
            let mut errors = 0u64;
            for mut p in batch.drain(..) {
                let mut miss = false;
                for _ in 0..p.replies {
                    match self.read_reply().await? {
                        Reply::Error => p.errors += 1,
                        Reply::NilOrZero => miss = true,
                        Reply::Value => {}
                    }
                }
                errors += p.errors;
                if let Some((u, cold)) = p.load_user.take() {
                    if miss && p.errors == 0 {
                        if p.measured {
                            self.stats.load_misses += 1;
                        }
                        followups.push((u, cold, p));
                        continue;
                    }
                }
                done += 1;
                if p.measured {
                    let end = Instant::now();
                    let us = end.duration_since(p.start).as_micros() as u64;
                    let i = p.kind.index();
                    self.stats.hists[i].saturating_record(us.max(1));
                    let ids = self.ids_of(p.kind);
                    let s = &mut self.stats.stats[i];
                    s.count += 1;
                    s.errors += p.errors;
                    s.ids += ids;
                    self.stats.last_done = Some(end);
                }
            }
            plan.done.fetch_add(done, Ordering::Relaxed);
            plan.errors.fetch_add(errors, Ordering::Relaxed);
        }
        Ok(self.stats)
    }
}

/// Runs the workload `args` describe and returns its report (also written to
/// `--json` if given).
///
/// # Errors
///
/// On bad options, a connection failure or a protocol error. Server error replies
/// are not errors here: they are counted in the report.
pub async fn run(args: &RunArgs) -> anyhow::Result<RunReport> {
    let data = args.data.dataset()?;
    anyhow::ensure!(args.connections > 0, "--connections must be > 0");
    anyhow::ensure!(args.pipeline > 0, "--pipeline must be > 0");
    anyhow::ensure!(args.batch > 0, "--batch must be > 0");
    let mix = parse_mix(&args.mix)?;
    let sampler = match args.dist {
        Dist::Uniform => UserSampler::uniform(data.users),
        Dist::Zipf => UserSampler::zipf(data.users, args.skew)?,
    };
    let host = args.server.host.clone();
    let port = args.server.port;

    let mut admin = Conn::connect(&host, port).await?;
    let mem_before = admin.used_memory().await?;

    let mut streams = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        let s = TcpStream::connect((host.as_str(), port))
            .await
            .with_context(|| format!("cannot connect to {host}:{port}"))?;
        s.set_nodelay(true)?;
        streams.push(s);
    }

    let start = Instant::now();
    let warm_end = start + Duration::from_secs_f64(args.warmup.max(0.0));
    let duration = match (args.duration, args.requests) {
        (Some(d), _) => Some(d),
        (None, None) => Some(10.0),
        (None, Some(_)) => None,
    };
    let plan = Arc::new(Plan {
        target: args.server.target,
        redis_type: args.server.redis_type,
        data,
        sampler,
        kinds: mix.iter().map(|&(k, _)| k).collect(),
        weights: WeightedIndex::new(mix.iter().map(|&(_, w)| w))?,
        pipeline: args.pipeline,
        batch: args.batch,
        which_keys: args.which_keys,
        hit_ratio: args.hit_ratio,
        decimal: args.decimal,
        miss_ttl_ms: args.miss_ttl_ms,
        always_miss: args.always_miss,
        warm_end,
        deadline: duration.map(|d| warm_end + Duration::from_secs_f64(d.max(0.0))),
        budget: args.requests.map(AtomicU64::new),
        done: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });

    let mut tasks = Vec::new();
    for (i, stream) in streams.into_iter().enumerate() {
        let w = Worker {
            plan: Arc::clone(&plan),
            id: i,
            seq: 0,
            rng: SmallRng::seed_from_u64(mix64(args.data.seed ^ mix64(i as u64 + 1000))),
            stream,
            out: BytesMut::with_capacity(64 * 1024),
            inbuf: BytesMut::with_capacity(64 * 1024),
            scratch: Vec::new(),
            stats: WorkerStats {
                hists: OP_KINDS.iter().map(|_| new_hist()).collect(),
                stats: vec![OpStats::default(); OP_KINDS.len()],
                error_kinds: BTreeMap::new(),
                load_misses: 0,
                last_done: None,
            },
        };
        tasks.push(tokio::spawn(w.run()));
    }

    let progress = (!args.quiet).then(|| {
        let plan = Arc::clone(&plan);
        tokio::spawn(async move {
            let tty = std::io::stderr().is_terminal();
            let mut last = (Instant::now(), 0u64);
            loop {
                tokio::time::sleep(Duration::from_millis(if tty { 500 } else { 2000 })).await;
                let now = Instant::now();
                let done = plan.done.load(Ordering::Relaxed);
                let rate = (done - last.1) as f64 / now.duration_since(last.0).as_secs_f64();
                last = (now, done);
                let phase = if now < plan.warm_end { "warmup" } else { "run" };
                let line = format!(
                    "[{:6.1}s {phase}] {done} requests, {rate:.0} req/s, {} errors",
                    now.duration_since(start).as_secs_f64(),
                    plan.errors.load(Ordering::Relaxed)
                );
                let mut e = std::io::stderr().lock();
                if tty {
                    let _ = write!(e, "\r{line}\x1b[K");
                } else {
                    let _ = writeln!(e, "{line}");
                }
                let _ = e.flush();
            }
        })
    });

    let mut hists: Vec<Histogram<u64>> = OP_KINDS.iter().map(|_| new_hist()).collect();
    let mut stats = vec![OpStats::default(); OP_KINDS.len()];
    let mut error_kinds = BTreeMap::new();
    let mut load_misses = 0;
    let mut last_done = warm_end;
    let mut failure = None;
    for t in tasks {
        match t.await? {
            Ok(w) => {
                for i in 0..OP_KINDS.len() {
                    hists[i].add(&w.hists[i])?;
                    stats[i].count += w.stats[i].count;
                    stats[i].errors += w.stats[i].errors;
                    stats[i].ids += w.stats[i].ids;
                }
                for (k, v) in w.error_kinds {
                    *error_kinds.entry(k).or_insert(0) += v;
                }
                load_misses += w.load_misses;
                if let Some(d) = w.last_done {
                    last_done = last_done.max(d);
                }
            }
            Err(e) => {
                plan.stop.store(true, Ordering::Relaxed);
                failure.get_or_insert(e);
            }
        }
    }
    if let Some(p) = progress {
        p.abort();
        if std::io::stderr().is_terminal() {
            eprintln!();
        }
    }
    if let Some(e) = failure {
        return Err(e.context("a connection failed"));
    }
    let mem_after = admin.used_memory().await?;

    let mut total_hist = new_hist();
    let mut total = OpStats::default();
    let mut ops = BTreeMap::new();
    for (i, kind) in OP_KINDS.iter().enumerate() {
        total_hist.add(&hists[i])?;
        total.count += stats[i].count;
        total.errors += stats[i].errors;
        total.ids += stats[i].ids;
        if stats[i].count > 0 {
            let mut s = stats[i].clone();
            s.set_latency(&hists[i]);
            ops.insert(kind.name().to_string(), s);
        }
    }
    total.set_latency(&total_hist);
    let elapsed = last_done.duration_since(warm_end).as_secs_f64().max(1e-9);
    let report = RunReport {
        label: args.label.clone(),
        target: format!("{:?}", args.server.target).to_lowercase(),
        redis_type: format!("{:?}", args.server.redis_type).to_lowercase(),
        host,
        port,
        connections: args.connections,
        pipeline: args.pipeline,
        batch: args.batch,
        dist: format!("{:?}", args.dist).to_lowercase(),
        skew: args.skew,
        users: args.data.users,
        seed: args.data.seed,
        mix: args.mix.clone(),
        elapsed_s: elapsed,
        requests: total.count,
        ids_checked: total.ids,
        requests_per_s: total.count as f64 / elapsed,
        ids_per_s: total.ids as f64 / elapsed,
        errors: total.errors,
        error_kinds,
        load_misses,
        used_memory_before: mem_before,
        used_memory_after: mem_after,
        total,
        ops,
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(report)
}
