//! Command-line options, shared by the binary and the tests (which build a run by
//! parsing the same flags a user would type).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::dataset::Dataset;

/// Load generator for relation workloads: relcache vs Redis.
#[derive(Parser, Debug)]
#[command(name = "relcache-bench", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a workload and report throughput and latency.
    Run(RunArgs),
    /// Write the dataset to the server: one SET of a prebuilt table per user on
    /// relcache, SADD (or HSET) per user on Redis.
    Load(LoadArgs),
    /// Read result JSON files, write an SVG chart (and a markdown table) of the
    /// median throughput and p99 per (label, target).
    Chart(ChartArgs),
}

/// Which server is on the other end.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// relcache: IDSET.* commands, tables built client-side.
    Relcache,
    /// Redis: set (or hash) commands.
    Redis,
}

/// How a follow set is stored on Redis.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RedisType {
    /// A set: SADD / SISMEMBER / SMISMEMBER.
    Set,
    /// A hash of id → 1, as Weibo did: HSET / HGET / HMGET.
    Hash,
}

/// How users are chosen.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    /// Every user equally likely.
    Uniform,
    /// Zipf with exponent `--skew`: user 0 is the hottest.
    Zipf,
}

/// Where the server is.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// Server flavour (decides the commands sent).
    #[arg(long, value_enum, default_value = "relcache")]
    pub target: Target,
    /// Server host.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Server port.
    #[arg(long, default_value_t = 6379)]
    pub port: u16,
    /// Redis only: store follow sets as sets or hashes.
    #[arg(long, value_enum, default_value = "set")]
    pub redis_type: RedisType,
}

/// The dataset's shape; `load` and `run` must be given the same values.
#[derive(Args, Debug, Clone)]
pub struct DatasetArgs {
    /// Number of users (one follow set each).
    #[arg(long, default_value_t = 10_000)]
    pub users: u64,
    /// Seed of the dataset and of the request stream.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Key prefix: user u's set is `{prefix}{u}:following`.
    #[arg(long, default_value = "rb:")]
    pub prefix: String,
    /// Member ids are drawn from 1..=id-space.
    #[arg(long, default_value_t = 100_000_000)]
    pub id_space: u64,
    /// Median set size (log-normal).
    #[arg(long, default_value_t = 120.0)]
    pub size_median: f64,
    /// Log-normal shape: larger means a longer tail of big sets.
    #[arg(long, default_value_t = 1.1)]
    pub size_sigma: f64,
    /// Smallest set size.
    #[arg(long, default_value_t = 5)]
    pub size_min: u64,
    /// Largest set size.
    #[arg(long, default_value_t = 20_000)]
    pub size_max: u64,
}

impl DatasetArgs {
    /// The dataset these options describe.
    ///
    /// # Errors
    ///
    /// If a value is out of range.
    pub fn dataset(&self) -> anyhow::Result<Dataset> {
        anyhow::ensure!(self.users > 0, "--users must be > 0");
        anyhow::ensure!(self.id_space > 0, "--id-space must be > 0");
        anyhow::ensure!(
            self.size_median > 0.0 && self.size_median.is_finite(),
            "--size-median must be > 0"
        );
        anyhow::ensure!(
            self.size_sigma >= 0.0 && self.size_sigma.is_finite(),
            "--size-sigma must be >= 0"
        );
        anyhow::ensure!(
            self.size_min >= 1 && self.size_min <= self.size_max,
            "need 1 <= --size-min <= --size-max"
        );
        Ok(Dataset {
            users: self.users,
            seed: self.seed,
            prefix: self.prefix.clone(),
            id_space: self.id_space,
            size_median: self.size_median,
            size_sigma: self.size_sigma,
            size_min: self.size_min,
            size_max: self.size_max,
        })
    }
}

/// Options of `run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub data: DatasetArgs,
    /// Concurrent connections.
    #[arg(short = 'c', long, default_value_t = 4)]
    pub connections: usize,
    /// Requests in flight per connection.
    #[arg(short = 'P', long, default_value_t = 1)]
    pub pipeline: usize,
    /// Measure for this many seconds (default 10 unless --requests is given).
    #[arg(long, conflicts_with = "requests")]
    pub duration: Option<f64>,
    /// Measure exactly this many requests instead of a duration.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,
    /// Run (unmeasured) for this many seconds first.
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    /// How users are chosen.
    #[arg(long, value_enum, default_value = "zipf")]
    pub dist: Dist,
    /// Zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    pub skew: f64,
    /// Ids per batch check.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Keys per WHICH (one id against many keys).
    #[arg(long, default_value_t = 10)]
    pub which_keys: usize,
    /// Fraction of checked ids that are members.
    #[arg(long, default_value_t = 0.5)]
    pub hit_ratio: f64,
    /// Batch checks with IDSET.MEXISTS and decimal ids instead of IDSET.MEXISTSBIN.
    #[arg(long)]
    pub decimal: bool,
    /// Operation weights, e.g. `check=60,batch=20,relation=5,load=5,follow=5,unfollow=3,which=2`.
    #[arg(
        long,
        default_value = "check=60,batch=20,relation=5,load=5,follow=5,unfollow=3,which=2"
    )]
    pub mix: String,
    /// TTL of the sets written by load-on-miss, in ms (so the cold keys keep missing).
    #[arg(long, default_value_t = 1000)]
    pub miss_ttl_ms: u64,
    /// Load-on-miss ops use a fresh cold key each time (`{key}:cold:{conn}:{n}`, expiring
    /// after --miss-ttl-ms), so every one misses and writes; without it each user's
    /// cold key misses again only once its TTL has passed.
    #[arg(long)]
    pub always_miss: bool,
    /// A name for this run in reports and charts.
    #[arg(long, default_value = "run")]
    pub label: String,
    /// Write the results as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Options of `load`.
#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(flatten)]
    pub data: DatasetArgs,
    /// Concurrent connections.
    #[arg(short = 'c', long, default_value_t = 4)]
    pub connections: usize,
    /// Users written per round trip on each connection.
    #[arg(short = 'P', long, default_value_t = 32)]
    pub pipeline: usize,
    /// FLUSHALL first.
    #[arg(long)]
    pub flush: bool,
    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Options of `chart`.
#[derive(Args, Debug, Clone)]
pub struct ChartArgs {
    /// Result JSON files written by `run --json`.
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// The SVG to write.
    #[arg(long, default_value = "chart.svg")]
    pub out: PathBuf,
    /// Also write a markdown table of the medians here.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Chart title.
    #[arg(long, default_value = "relcache vs Redis")]
    pub title: String,
}
