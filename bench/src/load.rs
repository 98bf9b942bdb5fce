//! The `load` subcommand: writes the dataset to either server, the way a relation
//! service would on a cold start. relcache gets one `SET key <table>` per user with
//! the table built client-side; Redis gets `DEL` + `SADD key id …` (or `HSET key id 1
//! …`) per user, in chunks of 10 000 ids.

use std::io::Write as _;
use std::time::Instant;

use anyhow::Context as _;
use bytes::BytesMut;
use relcache_protocol::idset::Builder;
use relcache_protocol::resp::{write_array_header, write_bulk, Frame};

use crate::cli::{LoadArgs, RedisType, Target};
use crate::dataset::Dataset;
use crate::wire::{encode, write_bulk_u64, Conn};

/// Ids per SADD/HSET when loading Redis.
const CHUNK: usize = 10_000;

/// What `load` did.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    pub users: u64,
    pub ids: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub seconds: f64,
    pub used_memory_before: Option<u64>,
    pub used_memory_after: Option<u64>,
}

/// Encodes user `u`'s set; returns the number of replies it will produce.
fn encode_user(
    out: &mut BytesMut,
    data: &Dataset,
    target: Target,
    rt: RedisType,
    u: u64,
) -> (usize, u64) {
    let key = data.key(u);
    let ids = data.members(u);
    let n = ids.len() as u64;
    if target == Target::Relcache {
        let table = Builder::new().build(&ids);
        encode(out, &[b"SET", key.as_bytes(), &table]);
        return (1, n);
    }
    encode(out, &[b"DEL", key.as_bytes()]);
    let mut replies = 1;
    let hash = rt == RedisType::Hash;
    for chunk in ids.chunks(CHUNK) {
        write_array_header(out, 2 + chunk.len() * if hash { 2 } else { 1 });
        write_bulk(out, if hash { b"HSET" } else { b"SADD" });
        write_bulk(out, key.as_bytes());
        for &id in chunk {
            write_bulk_u64(out, id);
            if hash {
                write_bulk(out, b"1");
            }
        }
        replies += 1;
    }
    (replies, n)
}

async fn load_part(
    args: LoadArgs,
    data: Dataset,
    part: u64,
    parts: u64,
) -> anyhow::Result<(u64, u64, u64, Option<String>)> {
    let mut conn = Conn::connect(&args.server.host, args.server.port).await?;
    let mut out = BytesMut::new();
    let (mut users, mut ids, mut errors, mut first_error) = (0u64, 0u64, 0u64, None);
    let mut u = part;
    while u < data.users {
        let mut replies = 0;
        for _ in 0..args.pipeline.max(1) {
            if u >= data.users {
                break;
            }
            let (r, n) = encode_user(
                &mut out,
                &data,
                args.server.target,
                args.server.redis_type,
                u,
            );
            replies += r;
            ids += n;
            users += 1;
            u += parts;
        }
        conn.send(&mut out).await?;
        for _ in 0..replies {
            if let Frame::Error(e) = conn.read_frame().await? {
                errors += 1;
                first_error.get_or_insert_with(|| String::from_utf8_lossy(&e).into_owned());
            }
        }
    }
    Ok((users, ids, errors, first_error))
}

/// Loads the dataset `args` describes.
///
/// # Errors
///
/// On bad options or a connection failure. Error replies are counted in the report.
pub async fn load(args: &LoadArgs) -> anyhow::Result<LoadReport> {
    let data = args.data.dataset()?;
    let mut admin = Conn::connect(&args.server.host, args.server.port).await?;
    if args.flush {
        let r = admin.command(&[b"FLUSHALL"]).await?;
        anyhow::ensure!(!r.is_error(), "FLUSHALL failed: {r:?}");
    }
    let before = admin.used_memory().await?;
    let start = Instant::now();
    let parts = args.connections.max(1) as u64;
    let mut tasks = Vec::new();
    for p in 0..parts {
        tasks.push(tokio::spawn(load_part(
            args.clone(),
            data.clone(),
            p,
            parts,
        )));
    }
    let mut report = LoadReport::default();
    for t in tasks {
        let (users, ids, errors, first) = t.await?.context("loading failed")?;
        report.users += users;
        report.ids += ids;
        report.errors += errors;
        if report.first_error.is_none() {
            report.first_error = first;
        }
    }
    report.seconds = start.elapsed().as_secs_f64();
    report.used_memory_before = before;
    report.used_memory_after = admin.used_memory().await?;
    if !args.quiet {
        let _ = std::io::stderr().flush();
    }
    Ok(report)
}
