//! The `chart` subcommand: groups result files by (label, target), takes the median
//! of each figure over the rounds, and draws two bar panels (throughput, p99) as SVG;
//! optionally writes the same medians as a markdown table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context as _;
use plotters::prelude::*;

use crate::report::RunReport;

/// Medians of one (label, target) group.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub label: String,
    pub target: String,
    pub rounds: usize,
    pub requests_per_s: f64,
    pub ids_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub errors: u64,
    pub memory_after: Option<u64>,
}

/// The median of `v` (the mean of the middle two for an even count); 0 when empty.
#[must_use]
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Groups runs by (label, target) in first-seen order and takes medians.
#[must_use]
pub fn summarize(runs: &[RunReport]) -> Vec<Summary> {
    let mut order: Vec<(String, String)> = Vec::new();
    let mut groups: BTreeMap<(String, String), Vec<&RunReport>> = BTreeMap::new();
    for r in runs {
        let k = (r.label.clone(), r.target.clone());
        if !groups.contains_key(&k) {
            order.push(k.clone());
        }
        groups.entry(k).or_default().push(r);
    }
    order
        .into_iter()
        .map(|k| {
            let g = &groups[&k];
            let m = |f: &dyn Fn(&RunReport) -> f64| median(g.iter().map(|r| f(r)).collect());
            Summary {
                label: k.0.clone(),
                target: k.1.clone(),
                rounds: g.len(),
                requests_per_s: m(&|r| r.requests_per_s),
                ids_per_s: m(&|r| r.ids_per_s),
                p50_us: m(&|r| r.total.p50_us as f64),
                p99_us: m(&|r| r.total.p99_us as f64),
                p999_us: m(&|r| r.total.p999_us as f64),
                errors: g.iter().map(|r| r.errors).sum(),
                memory_after: g.iter().filter_map(|r| r.used_memory_after).max(),
            }
        })
        .collect()
}

/// The markdown table of `rows`.
#[must_use]
pub fn markdown(rows: &[Summary]) -> String {
    let mut s = String::from(
        "| workload | server | rounds | req/s | ids/s | p50 µs | p99 µs | p99.9 µs | errors | used_memory |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} |",
            r.label,
            r.target,
            r.rounds,
            r.requests_per_s,
            r.ids_per_s,
            r.p50_us,
            r.p99_us,
            r.p999_us,
            r.errors,
            r.memory_after
                .map_or_else(|| "-".into(), |b| format!("{:.1} MB", b as f64 / 1e6))
        );
    }
    s
}

fn color_of(target: &str) -> RGBColor {
    if target == "redis" {
        RGBColor(200, 60, 50)
    } else {
        RGBColor(40, 110, 190)
    }
}

/// Draws one bar panel: one bar per row, value from `value`.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    rows: &[Summary],
    title: &str,
    value: &dyn Fn(&Summary) -> f64,
) -> anyhow::Result<()> {
    let max = rows.iter().map(value).fold(0.0, f64::max).max(1.0) * 1.15;
    let n = rows.len().max(1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(70)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..max)
        .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    let labels: Vec<String> = rows
        .iter()
        .map(|r| format!("{} {}", r.label, r.target))
        .collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 && i < labels.len() {
                labels[i].clone()
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    chart
        .draw_series(rows.iter().enumerate().map(|(i, r)| {
            let c = color_of(&r.target);
            Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, value(r))],
                c.filled(),
            )
        }))
        .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    Ok(())
}

/// Writes the SVG chart of `rows` to `out`.
///
/// # Errors
///
/// If drawing or writing fails.
pub fn draw(rows: &[Summary], title: &str, out: &Path) -> anyhow::Result<()> {
    let width = (160 * rows.len() as u32).clamp(640, 2400);
    let root = SVGBackend::new(out, (width, 760)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    let (top, bottom) = root.split_vertically(360);
    panel(&top, rows, "throughput (requests/s, median)", &|r| {
        r.requests_per_s
    })?;
    panel(&bottom, rows, "p99 latency (µs, median)", &|r| r.p99_us)?;
    root.present().map_err(|e| anyhow::anyhow!("chart: {e}"))?;
    Ok(())
}

/// Reads result files.
///
/// # Errors
///
/// If a file cannot be read or parsed.
pub fn read_reports(paths: &[impl AsRef<Path>]) -> anyhow::Result<Vec<RunReport>> {
    paths
        .iter()
        .map(|p| {
            let p = p.as_ref();
            let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
            serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a result file", p.display()))
        })
        .collect()
}
