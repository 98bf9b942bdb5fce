//! `relcache-bench`: see the library docs and `relcache-bench --help`.

use clap::Parser;
use relcache_bench::cli::{Cli, Command};
use relcache_bench::{chart, load, workload};

#[tokio::main]
async fn main() {
    if let Err(e) = real_main().await {
        eprintln!("relcache-bench: error: {e:#}");
        std::process::exit(1);
    }
}

async fn real_main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(args) => {
            let report = workload::run(&args).await?;
            print!("{}", report.to_text());
            if let Some(p) = &args.json {
                println!("  results: {}", p.display());
            }
        }
        Command::Load(args) => {
            let r = load::load(&args).await?;
            println!(
                "loaded {} users, {} ids in {:.2}s ({:.0} ids/s) on {:?}; used_memory {:?} -> {:?}; {} errors",
                r.users,
                r.ids,
                r.seconds,
                r.ids as f64 / r.seconds.max(1e-9),
                args.server.target,
                r.used_memory_before,
                r.used_memory_after,
                r.errors
            );
            if let Some(e) = r.first_error {
                anyhow::bail!("{} error replies while loading, first: {e}", r.errors);
            }
        }
        Command::Chart(args) => {
            let runs = chart::read_reports(&args.inputs)?;
            let rows = chart::summarize(&runs);
            chart::draw(&rows, &args.title, &args.out)?;
            let md = chart::markdown(&rows);
            if let Some(p) = &args.markdown {
                std::fs::write(p, &md)?;
            }
            print!("{md}");
            println!("chart: {}", args.out.display());
        }
    }
    Ok(())
}
