//! `relcache-server`: reads the command line and config file, binds, and runs.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use relcache_server::Config;
use tokio_util::sync::CancellationToken;
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
    /// TCP port to listen on (0 picks a free one; the log says which).
    #[arg(long)]
    port: Option<u16>,
    /// Addresses to listen on, space-separated as in redis.conf (default 127.0.0.1).
    #[arg(long)]
    bind: Option<String>,
    /// Password clients must give with AUTH or HELLO.
    #[arg(long)]
    requirepass: Option<String>,
    /// Most simultaneous client connections.
    #[arg(long)]
    maxclients: Option<u64>,
    /// Memory limit for the dataset: bytes or 64mb, 2gb … (0 = none).
    #[arg(long)]
    maxmemory: Option<String>,
    /// What to do at maxmemory: noeviction, allkeys-lru, volatile-lru,
    /// allkeys-random, volatile-random, volatile-ttl.
    #[arg(long)]
    maxmemory_policy: Option<String>,
    /// Close clients idle for this many seconds (0 = never).
    #[arg(long)]
    timeout: Option<u64>,
    /// Largest bulk string a client may send (e.g. 512mb).
    #[arg(long)]
    proto_max_bulk_len: Option<String>,
    /// `normal <hard> <soft> <seconds>`.
    #[arg(long)]
    client_output_buffer_limit: Option<String>,
    /// Background task frequency (expiry sweeps), per second.
    #[arg(long)]
    hz: Option<u64>,
    /// debug, verbose, notice, warning, nothing.
    #[arg(long)]
    loglevel: Option<String>,
    /// Accepted for redis-server compatibility: relcache never persists.
    #[arg(long)]
    save: Option<String>,
    /// Accepted for redis-server compatibility: must be `no`.
    #[arg(long)]
    appendonly: Option<String>,
    /// How long a lease on a missing key lasts, in milliseconds, unless the
    /// command asks for another time (default 10000).
    #[arg(long)]
    lease_timeout: Option<u64>,
    /// Worker threads serving clients (default: one per core).
    #[arg(long)]
    threads: Option<usize>,
}

/// Every allocation is counted: INFO's used_memory and the maxmemory limit use it.
#[global_allocator]
static ALLOC: relcache_server::alloc::Counting = relcache_server::alloc::Counting;

fn main() -> anyhow::Result<()> {
    relcache_server::alloc::mark_installed();
    let cli = Cli::parse();
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
    let flags: [(&str, Option<String>); 14] = [
        ("port", cli.port.map(|p| p.to_string())),
        ("bind", cli.bind),
        ("requirepass", cli.requirepass),
        ("maxclients", cli.maxclients.map(|v| v.to_string())),
        ("maxmemory", cli.maxmemory),
        ("maxmemory-policy", cli.maxmemory_policy),
        ("timeout", cli.timeout.map(|v| v.to_string())),
        ("proto-max-bulk-len", cli.proto_max_bulk_len),
        ("client-output-buffer-limit", cli.client_output_buffer_limit),
        ("hz", cli.hz.map(|v| v.to_string())),
        ("loglevel", cli.loglevel),
        ("save", cli.save),
        ("appendonly", cli.appendonly),
        ("lease-timeout", cli.lease_timeout.map(|v| v.to_string())),
    ];
    for (name, value) in flags {
        if let Some(v) = value {
            config
                .set(name, &v, true)
                .map_err(|e| anyhow::anyhow!("--{name}: {e}"))?;
        }
    }

    let level = match config.get("loglevel").as_deref() {
        Some("debug") => "debug",
        Some("verbose") => "info",
        Some("warning") => "warn",
        Some("nothing") => "off",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level)),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();

    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = cli.threads {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.enable_all().thread_name("relcache-worker").build()?;
    rt.block_on(async move {
        // Every bind address gets a listener, as in Redis. With port 0 the first
        // one picks a free port and the others use the same.
        let mut port = config.port.load(std::sync::atomic::Ordering::Relaxed) as u16;
        let ips: Vec<std::net::IpAddr> = config.bind.read().clone();
        let mut listeners = Vec::with_capacity(ips.len());
        for ip in ips {
            let addr = SocketAddr::new(ip, port);
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            port = l.local_addr()?.port();
            listeners.push(l);
        }
        let shutdown = CancellationToken::new();
        tokio::spawn(signals(shutdown.clone()));
        relcache_server::run(listeners, config, shutdown).await
    })
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
