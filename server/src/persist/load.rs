//! Loading the snapshot at start, on every core, while clients already connect.
//!
//! The file is memory-mapped and checked as it is decoded (the protocol crate's
//! decoder bounds-checks every length and validates every table). Chunks are
//! independent, so each loader thread takes every n-th chunk; a chunk is one
//! shard's keys, so inserting it takes that shard's lock about once.
//!
//! Values are copied out of the mapping rather than served from it: a copy is
//! counted by the allocator (so `used_memory` and `maxmemory` stay true), frees the
//! file's pages, and keeps in-place updates free of copy-on-write faults; on the
//! benchmark's 107 MB of tables copying cost no more than mapping (see the README).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use relcache_protocol::snapshot::{ChunkSpan, Record, Snapshot, SnapshotError};

use crate::db::{now_ms, IdSet, LockMode, Value};
use crate::server::Server;

/// Why a load failed.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Corrupt(#[from] SnapshotError),
}

/// Starts loading `dir/dbfilename` if it exists; the server answers `-LOADING`
/// until it is done. On a refused file the server shuts down with the error in
/// `persist.load_error`, unless `snapshot-load-corrupt` is `start-empty`.
pub fn start_load(server: &Arc<Server>) -> std::io::Result<Option<std::thread::JoinHandle<()>>> {
    let path = server
        .config
        .dir
        .read()
        .join(&*server.config.dbfilename.read());
    let Ok(meta) = std::fs::metadata(&path) else {
        return Ok(None);
    };
    let state = &server.persist;
    state.loading_start_ms.store(now_ms(), Relaxed);
    state.loading_total_bytes.store(meta.len(), Relaxed);
    state.loading.store(true, Relaxed);
    let server = server.clone();
    std::thread::Builder::new()
        .name("relcache-loader".into())
        .spawn(move || {
            let started = Instant::now();
            match load_file(&server, &path) {
                Ok(()) => tracing::info!(
                    keys = server.persist.last_load_keys_loaded.load(Relaxed),
                    expired = server.persist.last_load_keys_expired.load(Relaxed),
                    ms = started.elapsed().as_millis() as u64,
                    "DB loaded from disk"
                ),
                Err(e) => refused(&server, &path, &e),
            }
            // Loading is not a change: the keyspace now matches the file.
            server
                .persist
                .dirty_at_save
                .store(server.db.dirty.get(), Relaxed);
            server.persist.loading.store(false, Relaxed);
        })
        .map(Some)
}

fn refused(server: &Server, path: &Path, e: &LoadError) {
    // Nothing half-loaded may be served: clients could not write meanwhile, so
    // everything in the keyspace came from the file.
    server
        .db
        .view::<&[u8]>(&[], true, LockMode::Write)
        .clear_all();
    for counter in [
        &server.persist.last_load_keys_loaded,
        &server.persist.last_load_keys_expired,
    ] {
        counter.store(0, Relaxed);
    }
    if server.config.snapshot_start_empty.load(Relaxed) {
        tracing::error!(
            "{}: {e}; starting empty (snapshot-load-corrupt start-empty)",
            path.display()
        );
        return;
    }
    let msg = format!(
        "{}: {e}; refusing to start (set snapshot-load-corrupt start-empty to start empty instead)",
        path.display()
    );
    tracing::error!("{msg}");
    *server.persist.load_error.lock() = Some(msg);
    server.shutdown.cancel();
}

fn load_file(server: &Server, path: &Path) -> Result<(), LoadError> {
    let io = |source| LoadError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    // SAFETY: the map is read-only and private to this function; relcache writes
    // snapshots to a temporary name and renames them, so no writer of ours changes
    // a file after it is in place. Another process truncating it under us would be
    // an operator error, as for any mmap reader.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
    let snap = Snapshot::open(&map)?;
    server
        .persist
        .last_load_ctime_ms
        .store(snap.created_ms(), Relaxed);

    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, snap.chunks().len().max(1));
    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<SnapshotError>> = Mutex::new(None);
    let (loaded, expired) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (snap, stop, first_error) = (&snap, &stop, &first_error);
            let (loaded, expired) = (&loaded, &expired);
            scope.spawn(move || {
                let mine = snap.chunks().iter().skip(t).step_by(threads);
                for span in mine {
                    if stop.load(Relaxed) {
                        return;
                    }
                    match load_chunk(server, snap, span) {
                        Ok((l, x)) => {
                            loaded.fetch_add(l, Relaxed);
                            expired.fetch_add(x, Relaxed);
                            server.persist.loading_loaded_keys.fetch_add(l + x, Relaxed);
                        }
                        Err(e) => {
                            stop.store(true, Relaxed);
                            // Report the earliest problem in the file, whichever
                            // thread found one first.
                            let mut slot = first_error.lock();
                            if slot.as_ref().is_none_or(|f| e.offset < f.offset) {
                                *slot = Some(e);
                            }
                            return;
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner() {
        return Err(e.into());
    }
    let state = &server.persist;
    state
        .last_load_keys_loaded
        .store(loaded.into_inner(), Relaxed);
    state
        .last_load_keys_expired
        .store(expired.into_inner(), Relaxed);
    Ok(())
}

/// Decodes one chunk and stores its live keys; returns (loaded, expired).
fn load_chunk(
    server: &Server,
    snap: &Snapshot<'_>,
    span: &ChunkSpan,
) -> Result<(u64, u64), SnapshotError> {
    let now = now_ms();
    let mut entries = Vec::with_capacity(span.records as usize);
    let mut expired = 0;
    for record in snap.records(span)? {
        let record = record?;
        let expire_at = record.expire_at();
        if expire_at != 0 && expire_at <= now {
            expired += 1;
            continue;
        }
        let value = match record {
            Record::String { value, .. } => Value::Str(Bytes::copy_from_slice(value)),
            Record::Set { table, seq, .. } => {
                Value::IdSet(IdSet::from_valid(Bytes::copy_from_slice(table)).with_seq(seq))
            }
        };
        entries.push((Keyed(record.key(), record.offset()), value, expire_at));
    }
    let loaded = entries.len() as u64;
    server.db.restore(entries).map_err(|dup| {
        SnapshotError::new(
            dup.1,
            relcache_protocol::snapshot::Section::Records(span.index),
            format!(
                "key '{}' appears twice",
                String::from_utf8_lossy(&dup.0[..dup.0.len().min(64)])
            ),
        )
    })?;
    Ok((loaded, expired))
}

/// A key with the offset of its record, so a duplicate can be reported where it is.
struct Keyed<'a>(&'a [u8], u64);

impl AsRef<[u8]> for Keyed<'_> {
    fn as_ref(&self) -> &[u8] {
        self.0
    }
}
