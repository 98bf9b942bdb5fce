//! Writing a snapshot of the live keyspace without stopping clients.
//!
//! One shard at a time: under the shard's read lock, take a handle on each live
//! entry (the key, and the value's reference-counted `Bytes`: no value bytes are
//! copied), then release the lock and encode the batch as one chunk. A whole
//! shard is taken at once, not a part of one: entries sit densely in the shard's
//! map and a removal moves the last entry into the gap, so a cursor resumed after
//! releasing the lock could skip a key nobody changed. A shard is 1/256 of the
//! keyspace, so the handles held at once are bounded by that.
//!
//! The file is written to a temporary name in `dir`, synced, renamed over the
//! snapshot and the directory synced, so a crash at any point leaves the previous
//! snapshot whole.

use std::fs::{self, File};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;
use relcache_protocol::snapshot::{ChunkBuilder, Encoder};

use crate::db::{now_ms, Key, Value, SHARDS};
use crate::server::Server;

/// A failed save: what was being done and the I/O error.
#[derive(Debug, thiserror::Error)]
#[error("{what} {}: {source}", path.display())]
pub struct SaveError {
    what: &'static str,
    path: PathBuf,
    source: io::Error,
}

/// What a save wrote.
#[derive(Debug)]
pub struct Report {
    /// The recorded time: Unix ms the save started at.
    pub created_ms: u64,
    /// The dirty counter when the save started.
    pub dirty_at_start: u64,
    pub keys: u64,
    pub bytes: u64,
    /// Most value bytes one batch held handles on.
    pub peak_pinned: u64,
}

/// One entry's handles, taken under the shard lock.
enum Held {
    Str(Bytes),
    Set(Bytes, u64),
}

/// Writes the whole keyspace to `dir/dbfilename`.
pub fn write_snapshot(server: &Server) -> Result<Report, SaveError> {
    let dir = server.config.dir.read().clone();
    let target = dir.join(&*server.config.dbfilename.read());
    let temp = dir.join(format!("temp-{}.rcs", std::process::id()));
    let result = write_to(server, &temp).and_then(|report| {
        fs::rename(&temp, &target).map_err(|e| err("renaming to", &target, e))?;
        // The rename is durable only once the directory is.
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| err("syncing directory", &dir, e))?;
        Ok(report)
    });
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

fn err(what: &'static str, path: &Path, source: io::Error) -> SaveError {
    SaveError {
        what,
        path: path.to_path_buf(),
        source,
    }
}

fn write_to(server: &Server, path: &Path) -> Result<Report, SaveError> {
    let state = &server.persist;
    // The recorded time and the dirty mark are taken before the first shard is
    // read: every write that finished before this instant is in the file.
    let dirty_at_start = server.db.dirty.get();
    let created_ms = now_ms();
    state.current_started_ms.store(created_ms, Relaxed);
    state.current_keys_processed.store(0, Relaxed);
    state
        .current_keys_total
        .store(server.db.len() as u64, Relaxed);

    let io = |e| err("writing", path, e);
    let file = File::create(path).map_err(io)?;
    let mut enc = Encoder::new(BufWriter::with_capacity(1 << 20, file), created_ms).map_err(io)?;
    let (mut keys, mut peak_pinned) = (0u64, 0u64);
    let mut batch: Vec<(Key, Held, u64)> = Vec::new();
    for idx in 0..SHARDS {
        batch.clear();
        let mut pinned = 0u64;
        {
            let now = now_ms();
            let map = server.db.shard(idx).map.read();
            batch.reserve(map.len());
            for (key, entry) in map.iter() {
                let expire_at = entry.expire_at().unwrap_or(0);
                if expire_at != 0 && expire_at <= now {
                    continue;
                }
                let held = match entry.value() {
                    Value::Str(b) => Held::Str(b.clone()),
                    Value::IdSet(s) => Held::Set(s.bytes().clone(), s.seq()),
                };
                pinned += entry.value().heap_size() as u64;
                batch.push((key.clone(), held, expire_at));
            }
        }
        if batch.is_empty() {
            continue;
        }
        peak_pinned = peak_pinned.max(pinned);
        let mut chunk = ChunkBuilder::new();
        for (key, held, expire_at) in &batch {
            match held {
                Held::Str(v) => chunk.string(key, v, *expire_at),
                Held::Set(t, seq) => chunk.set(key, t, *seq, *expire_at),
            }
        }
        enc.write_chunk(&chunk).map_err(io)?;
        keys += batch.len() as u64;
        state.current_keys_processed.store(keys, Relaxed);
    }
    batch.clear();
    let bytes = enc.position() + 32;
    let file = enc
        .finish()
        .map_err(io)?
        .into_inner()
        .map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(Report {
        created_ms,
        dirty_at_start,
        keys,
        bytes,
        peak_pinned,
    })
}
