//! `relcache-server`: reads the command line and config file, binds, and runs.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use relcache_server::config::PARAMS;
use relcache_server::Config;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// An in-memory relation cache server that speaks the Redis protocol.
///
/// Options use Redis's names; any of them can also be set in a redis.conf-style
/// config file (given first) and, where Redis allows it, with CONFIG SET.
#[derive(Parser, Debug)]
#[command(name = "relcache-server", version, args_override_self = true)]
struct Cli {
    /// A config file in redis.conf syntax (`name value` per line).
    config_file: Option<PathBuf>,
    /// Threads serving clients, each an event loop of its own (default: one per
    /// core).
    #[arg(long)]
    threads: Option<usize>,
}

/// The command line: [`Cli`] plus one `--name value` flag per configuration
/// parameter, made from the same table the config file and CONFIG SET use, so a
/// new parameter is a flag with no edit here. As with redis-server, a value may
/// be several words up to the next flag (`--bind 127.0.0.1 ::1`, `--save 900 1`),
/// joined as one config line would have them.
fn command_line() -> clap::Command {
    PARAMS.iter().fold(Cli::command(), |cmd, p| {
        cmd.arg(
            clap::Arg::new(p.name)
                .long(p.name)
                .value_name("VALUE")
                .num_args(1..)
                .allow_negative_numbers(true)
                .help(p.help),
        )
    })
}

/// Every allocation is counted: INFO's used_memory and the maxmemory limit use it.
#[global_allocator]
static ALLOC: relcache_server::alloc::Counting = relcache_server::alloc::Counting;

fn main() -> anyhow::Result<()> {
    relcache_server::alloc::mark_installed();
    let matches = command_line().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let config = Config::default();
    if let Some(path) = &cli.config_file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        config
            .load_file(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        *config.config_file.write() =
            Some(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()));
    }
    // Flags override the file, as in redis-server.
    for p in PARAMS {
        if let Some(words) = matches.get_many::<String>(p.name) {
            let value = words.map(String::as_str).collect::<Vec<_>>().join(" ");
            config
                .set(p.name, &value, true)
                .map_err(|e| anyhow::anyhow!("--{}: {e}", p.name))?;
        }
    }

    // RUST_LOG, when set, chooses the filter at start; CONFIG SET loglevel replaces
    // it either way, through the reload handle.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(config.loglevel.read().tracing_filter()));
    let (filter, reload) = tracing_subscriber::reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .init();
    config.on_loglevel_change(move |level| {
        if let Err(e) = reload.reload(EnvFilter::new(level.tracing_filter())) {
            tracing::warn!(error = %e, "cannot change the log level");
        }
    });
    // Before the loops start; after the log, which reports a refusal.
    relcache_server::alloc::tune_system_allocator();

    // Clients are served by loops of their own, one per thread (`--threads`);
    // this runtime accepts their connections and runs the cluster bus.
    let loops = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("relcache-main")
        .build()?;
    rt.block_on(async move {
        // Every bind address gets a listener, as in Redis. With port 0 the first
        // one picks a free port and the others use the same.
        let mut port = config.port.load(std::sync::atomic::Ordering::Relaxed) as u16;
        let backlog = config
            .tcp_backlog
            .load(std::sync::atomic::Ordering::Relaxed) as u32;
        warn_if_backlog_capped(backlog);
        let ips: Vec<std::net::IpAddr> = config.bind.read().clone();
        let mut listeners = Vec::with_capacity(ips.len());
        for ip in ips {
            let addr = SocketAddr::new(ip, port);
            let l = listen(addr, backlog).with_context(|| format!("binding {addr}"))?;
            port = l.local_addr()?.port();
            listeners.push(l);
        }
        let shutdown = CancellationToken::new();
        tokio::spawn(signals(shutdown.clone()));
        relcache_server::run(listeners, config, loops, shutdown).await
    })
}

/// A listener on `addr` with a listen queue of `backlog` (`tcp-backlog`), reusing
/// the address as redis-server does so a restart need not wait out TIME_WAIT.
fn listen(addr: SocketAddr, backlog: u32) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// The kernel silently caps the listen queue at `net.core.somaxconn`; say so, as
/// redis-server does, since a short queue makes bursts of connects wait a second.
fn warn_if_backlog_capped(backlog: u32) {
    let Ok(text) = std::fs::read_to_string("/proc/sys/net/core/somaxconn") else {
        return;
    };
    if let Ok(max) = text.trim().parse::<u32>() {
        if max < backlog {
            tracing::warn!(
                "the TCP backlog setting of {backlog} cannot be enforced because \
                 /proc/sys/net/core/somaxconn is set to the lower value of {max}"
            );
        }
    }
}

/// SIGTERM and SIGINT start a graceful shutdown.
async fn signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("received SIGTERM, scheduling shutdown"),
        _ = int.recv() => tracing::info!("received SIGINT, scheduling shutdown"),
    }
    shutdown.cancel();
}
