//! Runs against a real relcache-server: request accounting and error counting.

mod common;

use common::{cli, Server};
use relcache_bench::cli::Command;
use relcache_bench::wire::Conn;
use relcache_protocol::resp::Frame;

fn run_args(cmd: Command) -> relcache_bench::cli::RunArgs {
    match cmd {
        Command::Run(a) => a,
        other => panic!("expected run, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_n_requests_counts_exactly_n() {
    let server = Server::start();
    let port = server.port.to_string();
    let common = [
        "--port", &port, "--users", "300", "--seed", "9", "--prefix", "n:",
    ];
    let Command::Load(load) = cli(&[&["load"][..], &common[..], &["-q"]].concat()) else {
        unreachable!()
    };
    let loaded = relcache_bench::load::load(&load).await.unwrap();
    assert_eq!(loaded.users, 300);
    assert_eq!(loaded.errors, 0, "load errors: {:?}", loaded.first_error);

    // 1237 is not a multiple of connections × pipeline, so the last batches are partial.
    let args = run_args(cli(&[
        &["run"][..],
        &common[..],
        &["--requests", "1237", "-c", "3", "-P", "8", "-q"],
    ]
    .concat()));
    let r = relcache_bench::workload::run(&args).await.unwrap();
    assert_eq!(r.requests, 1237);
    assert_eq!(r.total.count, 1237);
    assert_eq!(r.ops.values().map(|o| o.count).sum::<u64>(), 1237);
    assert_eq!(r.errors, 0, "unexpected errors: {:?}", r.error_kinds);
    assert!(
        r.ops.len() >= 5,
        "the default mix should hit most op types: {:?}",
        r.ops.keys()
    );
    assert!(r.total.p50_us > 0 && r.total.p50_us <= r.total.p99_us);
    assert!(r.total.p99_us <= r.total.max_us);
    assert!(r.used_memory_before.unwrap() > 0);

    // Batch checks count `--batch` ids each.
    let args = run_args(cli(&[
        &["run"][..],
        &common[..],
        &[
            "--requests",
            "200",
            "--mix",
            "batch=1",
            "--batch",
            "25",
            "-q",
        ],
    ]
    .concat()));
    let r = relcache_bench::workload::run(&args).await.unwrap();
    assert_eq!(r.requests, 200);
    assert_eq!(r.ids_checked, 200 * 25);
    assert_eq!(r.errors, 0, "unexpected errors: {:?}", r.error_kinds);

    // With --always-miss every load-on-miss op misses, builds the table and SETs it.
    let args = run_args(cli(&[
        &["run"][..],
        &common[..],
        &[
            "--requests",
            "60",
            "--mix",
            "load=1",
            "--always-miss",
            "-P",
            "4",
            "-q",
        ],
    ]
    .concat()));
    let r = relcache_bench::workload::run(&args).await.unwrap();
    assert_eq!(r.requests, 60);
    assert_eq!(r.load_misses, 60);
    assert_eq!(r.errors, 0, "unexpected errors: {:?}", r.error_kinds);
    assert!(
        r.used_memory_after > r.used_memory_before,
        "the loaded sets take memory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_are_counted_not_ignored() {
    let server = Server::start();
    // Every user's key holds a string, so every batch check gets WRONGTYPE.
    let mut conn = Conn::connect("127.0.0.1", server.port).await.unwrap();
    for u in 0..20 {
        let key = format!("s:{u}:following");
        let r = conn
            .command(&[b"SET", key.as_bytes(), b"not a set"])
            .await
            .unwrap();
        assert_eq!(r, Frame::Simple("OK".into()));
    }
    for extra in [&[][..], &["--decimal"][..]] {
        let port = server.port.to_string();
        let args = run_args(cli(&[
            &[
                "run",
                "--port",
                &port,
                "--users",
                "20",
                "--prefix",
                "s:",
                "--mix",
                "batch=1",
                "--requests",
                "150",
                "-c",
                "2",
                "-P",
                "4",
                "-q",
            ][..],
            extra,
        ]
        .concat()));
        let r = relcache_bench::workload::run(&args).await.unwrap();
        assert_eq!(r.requests, 150);
        assert_eq!(
            r.errors, 150,
            "every reply was an error: {:?}",
            r.error_kinds
        );
        assert_eq!(r.ops["batch"].errors, 150);
        let (text, n) = r.error_kinds.iter().next().expect("error texts are kept");
        assert!(text.starts_with("WRONGTYPE"), "error text {text:?}");
        assert_eq!(*n, 150);
        assert!(r.to_text().contains("150 errors"), "{}", r.to_text());
    }
}
