//! The chart subcommand's medians, markdown and SVG.

use relcache_bench::chart::{draw, markdown, median, read_reports, summarize};
use relcache_bench::report::RunReport;

fn run(label: &str, target: &str, rps: f64, p99: u64) -> RunReport {
    let mut r = RunReport {
        label: label.into(),
        target: target.into(),
        requests_per_s: rps,
        ..RunReport::default()
    };
    r.total.p99_us = p99;
    r
}

#[test]
fn medians_per_label_and_target_into_markdown_and_svg() {
    assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    let runs = vec![
        run("batch", "relcache", 100.0, 50),
        run("batch", "redis", 60.0, 90),
        run("batch", "relcache", 300.0, 70),
        run("batch", "redis", 50.0, 80),
        run("batch", "relcache", 200.0, 60),
        run("batch", "redis", 70.0, 100),
    ];
    let rows = summarize(&runs);
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].target.as_str(), rows[0].rounds), ("relcache", 3));
    assert_eq!(rows[0].requests_per_s, 200.0);
    assert_eq!(rows[0].p99_us, 60.0);
    assert_eq!(rows[1].requests_per_s, 60.0);
    let md = markdown(&rows);
    assert!(md.contains("| batch | relcache | 3 | 200 |"), "{md}");

    let dir = std::env::temp_dir().join(format!("relcache-bench-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let files: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let p = dir.join(format!("{i}.json"));
            std::fs::write(&p, serde_json::to_vec(r).unwrap()).unwrap();
            p
        })
        .collect();
    assert_eq!(read_reports(&files).unwrap(), runs);
    let svg = dir.join("chart.svg");
    draw(&rows, "test", &svg).unwrap();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"));
    assert!(text.contains("batch relcache") && text.contains("batch redis"));
    std::fs::remove_dir_all(&dir).unwrap();
}
