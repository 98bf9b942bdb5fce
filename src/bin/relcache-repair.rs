//! `relcache-repair`: runs the relation tier's repair job (see
//! `relcache_relation::repair`) against the shards of a shard map file.
//!
//! ```text
//! relcache-repair --shards shards.conf full --rate 2000       # resumable full scan
//! relcache-repair --shards shards.conf full --restart         # from the beginning
//! relcache-repair --shards shards.conf recent --since 10m     # from relation_log
//! relcache-repair --shards shards.conf prune --older-than 7d  # trim relation_log
//! relcache-repair --shards shards.conf schema                 # create missing tables
//! relcache-repair --shards shards.conf catchup --cache 127.0.0.1:6379   # after a restart
//! ```
//!
//! Prints the report on stdout and exits 0; any error exits 1 with the shard, host
//! and step that failed. A full scan stopped by `--max-rows` (or an error, or a kill)
//! continues from its checkpoint on the next run.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use relcache_client::{Cmd, Pool, PoolConfig};
use relcache_relation::catchup::{self, CatchUpConfig};
use relcache_relation::repair::{self, RepairConfig};
use relcache_relation::store::now_micros;
use relcache_relation::{schema, ShardMap, Store, StoreConfig};

#[derive(Debug, Parser)]
#[command(
    name = "relcache-repair",
    version,
    about = "Find and fix inconsistent follow rows in sharded MySQL"
)]
struct Cli {
    /// The shard map file (`shards N` and `RANGE URL DATABASE` lines).
    #[arg(long, value_name = "FILE")]
    shards: PathBuf,

    /// Rows read per second, at most (0: unlimited).
    #[arg(long, default_value_t = 5000)]
    rate: u32,

    /// Rows read per statement.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    batch: u32,

    /// Longest wait for a MySQL connection (`500ms`, `2s`, …).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    connect_timeout: Duration,

    /// Longest time one batch's statements may take together.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    query_timeout: Duration,

    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Scan every shard's following and followers tables, resuming from the last
    /// checkpoint.
    Full {
        /// Forget the checkpoints and start from the first shard.
        #[arg(long)]
        restart: bool,
        /// Stop after reading this many rows (the next run continues).
        #[arg(long)]
        max_rows: Option<u64>,
    },
    /// Check only the pairs followed or unfollowed within the window.
    Recent {
        /// How far back to look (`10m`, `1h`, …): a little more than the interval
        /// between runs.
        #[arg(long, value_parser = parse_duration)]
        since: Duration,
    },
    /// Delete relation_log rows older than the given age.
    Prune {
        /// Keep rows younger than this (`7d`, …): longer than any `recent --since`.
        #[arg(long, value_parser = parse_duration)]
        older_than: Duration,
    },
    /// Create every shard's database and tables where missing.
    Schema,
    /// Replay the changes logged since a cache's snapshot to its cached sets, as
    /// the relation service does by itself when it meets a restarted cache.
    Catchup {
        /// The cache, `host:port`.
        #[arg(long)]
        cache: String,
        /// Its password, if it has `requirepass` (or set RELCACHE_PASSWORD, which
        /// other users cannot see in the process list).
        #[arg(long)]
        password: Option<String>,
        /// The prefix of the sets' keys (the service's `key_prefix`).
        #[arg(long, default_value = "following:")]
        key_prefix: String,
        /// Replay the changes of this window (`10m`, …) instead of those since the
        /// cache's loaded snapshot.
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        /// How far before the snapshot's time to start.
        #[arg(long, default_value = "60s", value_parser = parse_duration)]
        margin: Duration,
    },
}

/// `250ms`, `30s`, `10m`, `2h`, `7d`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{s}` has no unit (ms, s, m, h, d)"))?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 10m"))?;
    let secs = |k: u64| {
        n.checked_mul(k)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("`{s}` is too long"))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        _ => Err(format!("`{s}`: unknown unit `{unit}` (ms, s, m, h, d)")),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let shards = ShardMap::load(&cli.shards)?;
    let store = Store::new(StoreConfig {
        connect_timeout: cli.connect_timeout,
        query_timeout: cli.query_timeout,
        pool_size: 4,
        ..StoreConfig::new(shards)
    });
    let config = RepairConfig {
        batch: cli.batch,
        rate: Some(cli.rate).filter(|&r| r > 0),
        max_rows: None,
    };
    match cli.mode {
        Mode::Full { restart, max_rows } => {
            let config = RepairConfig { max_rows, ..config };
            let report = repair::full_scan(&store, &config, restart)
                .await
                .context("full scan failed (the next run resumes from the last checkpoint)")?;
            println!("full scan: {report}");
        }
        Mode::Recent { since } => {
            let report = repair::recent(&store, &config, since)
                .await
                .context("recent scan failed")?;
            println!("recent scan ({since:?}): {report}");
        }
        Mode::Prune { older_than } => {
            let n = repair::prune_log(&store, older_than, cli.batch)
                .await
                .context("pruning relation_log failed")?;
            println!("pruned {n} relation_log rows older than {older_than:?}");
        }
        Mode::Catchup {
            cache,
            password,
            key_prefix,
            since,
            margin,
        } => {
            let cache = Pool::new(PoolConfig {
                addr: cache,
                password: password.or_else(|| std::env::var("RELCACHE_PASSWORD").ok()),
                max_connections: 1,
                command_timeout: cli.query_timeout,
                connect_timeout: cli.connect_timeout,
                ..PoolConfig::default()
            });
            let from = match since {
                Some(window) => now_micros().saturating_sub(window.as_micros() as u64),
                None => match catchup::loaded_snapshot_ms(
                    &cache
                        .run(Cmd::info("persistence"))
                        .await
                        .context("asking the cache for its snapshot time")?,
                ) {
                    Some(ms) => (ms * 1000).saturating_sub(margin.as_micros() as u64),
                    None => {
                        println!("the cache started empty: nothing to catch up");
                        return Ok(());
                    }
                },
            };
            let config = CatchUpConfig { batch: cli.batch };
            let report =
                catchup::catch_up(&store, &cache.clone().into(), &key_prefix, from, config)
                    .await
                    .context("catch-up failed (run it again: replaying is idempotent)")?;
            println!(
                "catch-up: {} changes replayed, {} applied, {} to sets not cached or dropped, in {:?}",
                report.changes, report.applied, report.not_applied, report.elapsed
            );
        }
        Mode::Schema => {
            schema::create_all(&store)
                .await
                .context("creating the schema failed")?;
            println!("schema ready on {} shards", store.shards().len());
        }
    }
    store.close().await.context("closing connections")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("m").is_err());
        assert!(parse_duration("3w").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "relcache-repair",
            "--shards",
            "m",
            "recent",
            "--since",
            "10m",
        ])
        .unwrap();
        assert!(matches!(cli.mode, Mode::Recent { since } if since == Duration::from_secs(600)));
    }
}
