//! The relation tier's repair job against a real MariaDB: half-committed follows
//! (made by really failing a commit), hand-broken rows, checkpoints, the rate limit
//! and log pruning.

mod harness;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use harness::mariadb::{self, relation_store, RawSql};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use relcache_relation::repair::{self, RepairConfig, Report};
use relcache_relation::store::Fixes;
use relcache_relation::{Fault, Store};

const SHARDS: u32 = 8;

/// No rate limit, small batches so scans take several.
const FAST: RepairConfig = RepairConfig {
    batch: 16,
    rate: None,
    max_rows: None,
};

const WINDOW: Duration = Duration::from_secs(600);

/// The first pair `(a, a + 1)` from `base` whose users are on different shards
/// (`cross`) or on the same one.
fn pair(store: &Store, base: u64, cross: bool) -> (u64, u64) {
    let map = store.shards();
    (base..)
        .map(|a| (a, a + 1))
        .find(|&(a, b)| (map.shard_of(a) != map.shard_of(b)) == cross)
        .unwrap()
}

/// Random follows among `users` users from `base`; answers who follows whom.
async fn graph(store: &Store, base: u64, users: u64, follows: usize) -> BTreeSet<(u64, u64)> {
    let mut rng = StdRng::seed_from_u64(base);
    let mut model = BTreeSet::new();
    while model.len() < follows {
        let a = base + rng.gen_range(0..users);
        let b = base + rng.gen_range(0..users);
        if a != b && model.insert((a, b)) {
            store.follow(a, b).await.unwrap();
        }
    }
    model
}

/// Rows in `following` plus `followers` over all shards.
async fn table_rows(raw: &RawSql) -> u64 {
    let mut total = 0;
    for shard in 0..raw.map().len() {
        let n: Vec<u64> = raw
            .query(
                shard,
                "SELECT (SELECT COUNT(*) FROM {db}.following) + (SELECT COUNT(*) FROM {db}.followers)",
                (),
            )
            .await;
        total += n[0];
    }
    total
}

fn fixes(twins_inserted: u64, twins_deleted: u64, twins_updated: u64, mutual_fixed: u64) -> Fixes {
    Fixes {
        twins_inserted,
        twins_deleted,
        twins_updated,
        mutual_fixed,
    }
}

fn assert_clean(report: &Report) {
    assert_eq!(report.fixes, Fixes::default(), "{report}");
    assert_eq!(report.pairs_reconciled, 0, "{report}");
    assert!(report.complete, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_scan_restores_twins_whose_commit_failed() {
    let store = relation_store(mariadb::shared().url(), "twin", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);

    // A follow whose second commit (b's shard) really fails.
    let (a, b) = pair(&store, 10, true);
    store.inject(Fault::KillSecondCommit);
    let out = store.follow(a, b).await.unwrap();
    assert!(out.created && out.twin_pending, "{out:?}");
    let [truth, twin, ..] = raw.pair(a, b).await;
    let (_, ts) = truth.expect("the truth committed");
    assert_eq!(twin, None, "the twin did not");
    assert!(store.is_following(a, b).await.unwrap());
    assert_eq!(store.followers_count(b).await.unwrap(), 0);

    let report = repair::recent(&store, &FAST, WINDOW).await.unwrap();
    assert_eq!(report.fixes, fixes(1, 0, 0, 0), "{report}");
    assert_eq!(report.pairs_reconciled, 1);
    assert_eq!(
        raw.row("followers", b, a).await,
        Some((false, ts)),
        "same auto_ts"
    );
    assert_clean(&repair::recent(&store, &FAST, WINDOW).await.unwrap());

    // A follow-back whose twin fails: the truth side (b's shard) has flagged both of
    // its rows mutual; a's shard still has neither the twin nor the flag.
    store.inject(Fault::KillSecondCommit);
    let out = store.follow(b, a).await.unwrap();
    assert!(out.created && out.mutual && out.twin_pending, "{out:?}");
    let report = repair::recent(&store, &FAST, WINDOW).await.unwrap();
    assert_eq!(report.fixes, fixes(1, 0, 0, 1), "{report}");
    let rows = raw.pair(a, b).await;
    assert!(
        rows.iter().all(|r| matches!(r, Some((true, _)))),
        "{rows:?}"
    );

    // An unfollow whose twin delete fails leaves an orphan twin.
    store.inject(Fault::KillSecondCommit);
    let out = store.unfollow(a, b).await.unwrap();
    assert!(out.removed && out.twin_pending, "{out:?}");
    assert!(raw.row("followers", b, a).await.is_some(), "orphan twin");
    let report = repair::recent(&store, &FAST, WINDOW).await.unwrap();
    // The orphan goes, and following(b, a) loses the mutual flag that its shard's
    // failed commit did not clear.
    assert_eq!(report.fixes, fixes(0, 1, 0, 1), "{report}");
    let [ab, ab_twin, ba, ba_twin] = raw.pair(a, b).await;
    assert_eq!((ab, ab_twin), (None, None));
    assert!(matches!(ba, Some((false, _))) && matches!(ba_twin, Some((false, _))));
    assert_clean(&repair::recent(&store, &FAST, WINDOW).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_commit_writes_nothing() {
    let store = relation_store(mariadb::shared().url(), "first", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    for cross in [true, false] {
        let (a, b) = pair(&store, 100, cross);
        store.inject(Fault::KillFirstCommit);
        let err = store.follow(a, b).await.unwrap_err();
        assert!(err.to_string().contains("commit"), "{err}");
        assert_eq!(raw.pair(a, b).await, [None; 4], "cross-shard: {cross}");
        let logged: Vec<u64> = raw
            .query(
                store.shards().shard_of(a),
                "SELECT COUNT(*) FROM {db}.relation_log WHERE user_id = ?",
                (a,),
            )
            .await;
        assert_eq!(logged, [0]);
        // The caller's retry succeeds.
        assert!(store.follow(a, b).await.unwrap().created);
        assert!(raw.pair(a, b).await[..2].iter().all(Option::is_some));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_scan_fixes_exactly_what_was_broken() {
    let store = relation_store(mariadb::shared().url(), "full", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    let model = graph(&store, 1_000, 40, 300).await;
    assert_clean(&repair::full_scan(&store, &FAST, true).await.unwrap());

    // Four one-way follows to break, and two users who have nothing to do with
    // each other.
    let one_way: Vec<(u64, u64)> = model
        .iter()
        .copied()
        .filter(|&(a, b)| !model.contains(&(b, a)))
        .take(3)
        .collect();
    let [(a1, b1), (a2, b2), (a3, b3)] = one_way[..] else {
        panic!("too few one-way follows")
    };
    let (x, y) = (5_000_000u64, 5_000_001u64);
    let shard = |u: u64| store.shards().shard_of(u);

    // (a) A missing twin.
    let n = raw
        .exec(
            shard(b1),
            "DELETE FROM {db}.followers WHERE user_id = ? AND friend_id = ?",
            (b1, a1),
        )
        .await;
    assert_eq!(n, 1);
    // (b) An orphan twin: "y follows x" with no following(y, x).
    raw.exec(
        shard(x),
        "INSERT INTO {db}.followers (user_id, friend_id, mutual, auto_ts) VALUES (?, ?, 0, 1)",
        (x, y),
    )
    .await;
    // (c) A mutual flag set on a one-way follow.
    let n = raw
        .exec(
            shard(a2),
            "UPDATE {db}.following SET mutual = 1 WHERE user_id = ? AND friend_id = ?",
            (a2, b2),
        )
        .await;
    assert_eq!(n, 1);
    // A twin whose follow time differs from its truth's.
    let n = raw
        .exec(
            shard(b3),
            "UPDATE {db}.followers SET auto_ts = auto_ts + 1 WHERE user_id = ? AND friend_id = ?",
            (b3, a3),
        )
        .await;
    assert_eq!(n, 1);

    let report = repair::full_scan(&store, &FAST, false).await.unwrap();
    assert_eq!(report.fixes, fixes(1, 1, 1, 1), "{report}");
    assert_eq!(report.pairs_reconciled, 4, "{report}");
    assert!(report.complete);

    let ts1 = raw.row("following", a1, b1).await.unwrap().1;
    assert_eq!(raw.row("followers", b1, a1).await, Some((false, ts1)));
    assert_eq!(raw.row("followers", x, y).await, None);
    assert_eq!(raw.row("following", a2, b2).await.map(|r| r.0), Some(false));
    let ts3 = raw.row("following", a3, b3).await.unwrap().1;
    assert_eq!(raw.row("followers", b3, a3).await, Some((false, ts3)));

    let again = repair::full_scan(&store, &FAST, false).await.unwrap();
    assert_clean(&again);
    assert_eq!(
        again.rows_scanned,
        table_rows(&raw).await,
        "every row, once"
    );
    assert_eq!(again.rows_scanned, 600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_mode_only_looks_inside_its_window() {
    let store = relation_store(mariadb::shared().url(), "window", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    let (a, b) = pair(&store, 300, true);
    store.follow(a, b).await.unwrap();
    // An old follow (its log row an hour old) whose twin is lost.
    raw.exec(
        store.shards().shard_of(a),
        "UPDATE {db}.relation_log SET ts = ts - 3600000000 WHERE user_id = ?",
        (a,),
    )
    .await;
    raw.exec(
        store.shards().shard_of(b),
        "DELETE FROM {db}.followers WHERE user_id = ? AND friend_id = ?",
        (b, a),
    )
    .await;
    let report = repair::recent(&store, &FAST, WINDOW).await.unwrap();
    assert_eq!(report.rows_scanned, 0, "{report}");
    assert_clean(&report);
    let report = repair::recent(&store, &FAST, Duration::from_secs(7200))
        .await
        .unwrap();
    assert_eq!(report.fixes, fixes(1, 0, 0, 0), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_scan_resumes_from_its_checkpoint() {
    let store = relation_store(mariadb::shared().url(), "resume", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    graph(&store, 2_000, 30, 150).await;
    let rows = table_rows(&raw).await;
    assert_eq!(rows, 300);
    let checkpoints = async || -> u64 {
        let mut n = 0;
        for shard in 0..SHARDS {
            let c: Vec<u64> = raw
                .query(shard, "SELECT COUNT(*) FROM {db}.repair_state", ())
                .await;
            n += c[0];
        }
        n
    };

    let limited = RepairConfig {
        max_rows: Some(100),
        ..FAST
    };
    let first = repair::full_scan(&store, &limited, true).await.unwrap();
    assert_eq!(first.rows_scanned, 100);
    assert!(!first.complete);
    assert!(checkpoints().await > 0, "a stopped scan leaves checkpoints");

    let rest = repair::full_scan(&store, &FAST, false).await.unwrap();
    assert_eq!(
        rest.rows_scanned,
        rows - 100,
        "the rerun continues, not restarts"
    );
    assert!(rest.complete);
    assert_eq!(checkpoints().await, 0, "a finished pass clears them");

    // A new pass reads everything; `restart` throws a stopped pass's place away.
    assert_eq!(
        repair::full_scan(&store, &FAST, false)
            .await
            .unwrap()
            .rows_scanned,
        rows
    );
    repair::full_scan(&store, &limited, false).await.unwrap();
    let again = repair::full_scan(&store, &FAST, true).await.unwrap();
    assert_eq!(again.rows_scanned, rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_scan_honours_the_rate_limit() {
    let store = relation_store(mariadb::shared().url(), "rate", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    graph(&store, 3_000, 30, 200).await;
    let rows = table_rows(&raw).await;
    let rate = 500;
    let config = RepairConfig {
        batch: 64,
        rate: Some(rate),
        max_rows: None,
    };
    let t = Instant::now();
    let report = repair::full_scan(&store, &config, true).await.unwrap();
    let took = t.elapsed();
    assert_eq!(report.rows_scanned, rows);
    let floor = Duration::from_secs_f64(rows as f64 / f64::from(rate)) - Duration::from_millis(50);
    assert!(took >= floor, "{rows} rows at {rate}/s took only {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_drops_only_old_log_rows() {
    let store = relation_store(mariadb::shared().url(), "prune", SHARDS, |_| {}).await;
    let raw = RawSql::new(&store);
    let model = graph(&store, 4_000, 20, 40).await;
    // Age the first 15 follows' log rows by two days.
    for &(a, b) in model.iter().take(15) {
        raw.exec(
            store.shards().shard_of(a),
            "UPDATE {db}.relation_log SET ts = ts - 172800000000 WHERE user_id = ? AND friend_id = ?",
            (a, b),
        )
        .await;
    }
    let day = Duration::from_secs(86_400);
    // Each user's newest row stays, however old: it numbers the user's cached set.
    let (mut prunable, mut newest_before) = (0, Vec::new());
    for shard in 0..SHARDS {
        let n: Vec<u64> = raw
            .query(
                shard,
                "SELECT COUNT(*) FROM {db}.relation_log l WHERE ts < ? AND seq < \
                 (SELECT MAX(seq) FROM {db}.relation_log m WHERE m.user_id = l.user_id)",
                (super_old_cutoff(),),
            )
            .await;
        prunable += n[0];
        newest_before.extend(newest_per_user(&raw, shard).await);
    }
    assert!(
        prunable > 0 && prunable < 15,
        "{prunable}: the graph has both kinds"
    );
    assert_eq!(repair::prune_log(&store, day, 4).await.unwrap(), prunable);
    assert_eq!(repair::prune_log(&store, day, 4).await.unwrap(), 0);
    let mut left = 0;
    let mut newest_after = Vec::new();
    for shard in 0..SHARDS {
        let n: Vec<u64> = raw
            .query(shard, "SELECT COUNT(*) FROM {db}.relation_log", ())
            .await;
        left += n[0];
        newest_after.extend(newest_per_user(&raw, shard).await);
    }
    assert_eq!(left, 40 - prunable);
    assert_eq!(newest_after, newest_before, "every user's newest row stays");
}

/// A cutoff a day and a half ago: the aged rows are before it, the rest after.
fn super_old_cutoff() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    now - 129_600_000_000
}

/// `(user, newest seq)` of every user with log rows on `shard`.
async fn newest_per_user(raw: &RawSql, shard: u32) -> Vec<(u64, u64)> {
    raw.query(
        shard,
        "SELECT user_id, MAX(seq) FROM {db}.relation_log GROUP BY user_id ORDER BY user_id",
        (),
    )
    .await
}

/// The `relcache-repair` binary, as an operator runs it: a shard map file with the
/// shards split over two host lines, a recent-mode run that fixes a half-committed
/// follow, and a full scan that then finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repair_binary_fixes_and_reports() {
    let url = mariadb::shared().url();
    let store = relation_store(url, "cli", SHARDS, |_| {}).await;
    let (a, b) = pair(&store, 500, true);
    store.inject(Fault::KillSecondCommit);
    assert!(store.follow(a, b).await.unwrap().twin_pending);

    let prefix = mariadb::db_prefix("cli");
    let dir = std::env::temp_dir().join(format!("relcache-repair-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let map = dir.join("shards.conf");
    std::fs::write(
        &map,
        format!(
            "# test\nshards {SHARDS}\n0-3 {url} {prefix}{{shard}}\n4-7 {url} {prefix}{{shard}}\n"
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_relcache-repair"))
            .arg("--shards")
            .arg(&map)
            .args(args)
            .output()
            .expect("run relcache-repair");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let recent = run(&["recent", "--since", "10m"]);
    assert!(recent.contains("twins inserted 1,"), "{recent}");
    let full = run(&["full", "--restart"]);
    assert!(
        full.contains("reconciled 0:") && full.contains("complete"),
        "{full}"
    );
    assert!(store.followers_count(b).await.unwrap() == 1);
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_relcache-repair"))
        .args(["--shards", "/nonexistent/shards.conf", "full"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1), "a missing map file is an error");
    std::fs::remove_dir_all(&dir).unwrap();
}
