//! Client-side caching as the keyspace sees it: which clients may hold a copy of
//! which key (Redis's tracking table), and the hook through which a change to a
//! key reaches them.
//!
//! The table is split like the keyspace, one part per shard, each behind its own
//! small mutex, because a read registers its keys while it holds its shard
//! *shared*: a write to the key needs the shard exclusively, so it either comes
//! before the read (which then reads the new value) or finds the reader
//! registered. Registering once the read has let go of its lock, as a
//! single-threaded server may, would let a write slip in between and leave the
//! client's copy stale for good.
//!
//! A change is noticed where the keyspace changes — a view's writes, expiry,
//! eviction — not in each command, so no write can forget to invalidate. The rule
//! is WATCH's: a key a write command takes for modification counts as changed.
//!
//! Sending an invalidation needs connections, which the keyspace knows nothing
//! of: the server installs an [`Invalidate`] sink at start.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use smallvec::SmallVec;

use super::Key;

/// A connection's id, as CLIENT ID reports it.
pub type ClientId = u64;

/// The ids of the clients that read one key.
pub type Readers = SmallVec<[ClientId; 2]>;

/// Where the keyspace's changes go when some client tracks keys.
pub trait Invalidate: Send + Sync {
    /// `key` changed. `readers` are the clients that had read it (they are no
    /// longer registered: a client registers again when it reads the key again);
    /// `writer` is the client whose command changed it, 0 for the server's own
    /// changes (expiry, eviction).
    fn key(&self, key: &[u8], readers: &[ClientId], writer: ClientId);
    /// Every key is gone (FLUSHALL, FLUSHDB).
    fn flush(&self, writer: ClientId);
}

/// One shard's part of the tracking table.
#[derive(Default)]
pub struct Table {
    keys: Mutex<ahash::HashMap<Key, Readers>>,
    /// Keys in `keys`, readable without the mutex: a write to a shard nobody
    /// tracks keys in does not take it.
    len: AtomicUsize,
}

/// The keyspace-wide side of tracking.
#[derive(Default)]
pub struct Tracking {
    /// Clients with tracking on. Zero nearly always, and then a write pays one
    /// load for tracking.
    clients: AtomicUsize,
    /// Of those, clients in BCAST mode: they hear of every change under their
    /// prefixes, so every change goes to the sink while there is one.
    bcast: AtomicUsize,
    /// Keys in all the tables, and (key, client) pairs: INFO's
    /// `tracking_total_keys` and `tracking_total_items`.
    keys: AtomicUsize,
    items: AtomicUsize,
    sink: OnceLock<Arc<dyn Invalidate>>,
}

impl Tracking {
    /// Installs where invalidations go; the server does it once, at start.
    pub fn install(&self, sink: Arc<dyn Invalidate>) {
        let _ = self.sink.set(sink);
    }

    /// Whether any client tracks keys: the one check a write makes.
    #[inline]
    pub fn active(&self) -> bool {
        self.clients.load(Relaxed) != 0
    }

    /// A client turned tracking on (`bcast`: in BCAST mode) or off.
    pub fn client_on(&self, bcast: bool) {
        self.clients.fetch_add(1, Relaxed);
        if bcast {
            self.bcast.fetch_add(1, Relaxed);
        }
    }

    pub fn client_off(&self, bcast: bool) {
        self.clients.fetch_sub(1, Relaxed);
        if bcast {
            self.bcast.fetch_sub(1, Relaxed);
        }
    }

    /// Clients with tracking on (INFO's `tracking_clients`).
    pub fn clients(&self) -> usize {
        self.clients.load(Relaxed)
    }

    /// (keys tracked, (key, client) pairs).
    pub fn totals(&self) -> (usize, usize) {
        (self.keys.load(Relaxed), self.items.load(Relaxed))
    }

    /// Registers `client` as a reader of `key`; the caller holds the key's shard.
    pub fn remember(&self, table: &Table, key: &[u8], client: ClientId) {
        let mut keys = table.keys.lock();
        let readers = match keys.get_mut(key) {
            Some(r) => r,
            None => {
                self.keys.fetch_add(1, Relaxed);
                table.len.fetch_add(1, Relaxed);
                keys.entry(Key::copy_from(key)).or_default()
            }
        };
        if !readers.contains(&client) {
            readers.push(client);
            self.items.fetch_add(1, Relaxed);
        }
    }

    /// `key` changed: its readers are told and forgotten, and BCAST clients hear
    /// of it. The caller holds the key's shard exclusively and has checked
    /// [`active`](Self::active).
    pub fn changed(&self, table: &Table, key: &[u8], writer: ClientId) {
        let readers = if table.len.load(Relaxed) == 0 {
            None
        } else {
            self.take(table, key)
        };
        if readers.is_none() && self.bcast.load(Relaxed) == 0 {
            return;
        }
        if let Some(sink) = self.sink.get() {
            sink.key(key, readers.as_deref().unwrap_or(&[]), writer);
        }
    }

    fn take(&self, table: &Table, key: &[u8]) -> Option<Readers> {
        let readers = table.keys.lock().remove(key)?;
        table.len.fetch_sub(1, Relaxed);
        self.keys.fetch_sub(1, Relaxed);
        self.items.fetch_sub(readers.len(), Relaxed);
        Some(readers)
    }

    /// Every key in `tables` is gone: they are emptied, and every tracking
    /// client is told. The caller holds all their shards exclusively.
    pub fn flushed<'t>(&self, tables: impl Iterator<Item = &'t Table>, writer: ClientId) {
        for table in tables {
            self.clear(table);
        }
        if let Some(sink) = self.sink.get() {
            sink.flush(writer);
        }
    }

    fn clear(&self, table: &Table) {
        if table.len.load(Relaxed) == 0 {
            return;
        }
        let old = std::mem::take(&mut *table.keys.lock());
        table.len.fetch_sub(old.len(), Relaxed);
        self.keys.fetch_sub(old.len(), Relaxed);
        self.items
            .fetch_sub(old.values().map(|r| r.len()).sum(), Relaxed);
    }

    /// Takes one key off `table` to bring the table under
    /// `tracking-table-max-keys`: its readers are told, as if it had changed
    /// (Redis's way: a client that is not told would go on trusting its copy).
    /// Returns false when the table had no key.
    pub fn shed_one(&self, table: &Table) -> bool {
        if table.len.load(Relaxed) == 0 {
            return false;
        }
        let key = {
            let keys = table.keys.lock();
            match keys.keys().next() {
                Some(k) => k.clone(),
                None => return false,
            }
        };
        if let Some(readers) = self.take(table, &key) {
            if let Some(sink) = self.sink.get() {
                sink.key(&key, &readers, 0);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (key, readers, writer) per message; an empty key for a flush.
    type Heard = (Vec<u8>, Vec<ClientId>, ClientId);

    #[derive(Default)]
    struct Record(Mutex<Vec<Heard>>);

    impl Invalidate for Record {
        fn key(&self, key: &[u8], readers: &[ClientId], writer: ClientId) {
            self.0.lock().push((key.to_vec(), readers.to_vec(), writer));
        }
        fn flush(&self, writer: ClientId) {
            self.0.lock().push((Vec::new(), Vec::new(), writer));
        }
    }

    #[test]
    fn a_change_tells_each_reader_once_and_forgets_them() {
        let t = Tracking::default();
        let rec = Arc::new(Record::default());
        t.install(rec.clone());
        t.client_on(false);
        let table = Table::default();
        t.remember(&table, b"k", 7);
        t.remember(&table, b"k", 7);
        t.remember(&table, b"k", 8);
        assert_eq!(t.totals(), (1, 2));
        t.changed(&table, b"other", 1);
        assert!(rec.0.lock().is_empty(), "an untracked key is nobody's news");
        t.changed(&table, b"k", 1);
        t.changed(&table, b"k", 1);
        assert_eq!(*rec.0.lock(), vec![(b"k".to_vec(), vec![7, 8], 1)]);
        assert_eq!(t.totals(), (0, 0));
    }

    #[test]
    fn bcast_clients_hear_of_untracked_keys_and_flush_empties_tables() {
        let t = Tracking::default();
        let rec = Arc::new(Record::default());
        t.install(rec.clone());
        t.client_on(true);
        let (a, b) = (Table::default(), Table::default());
        t.changed(&a, b"x", 3);
        t.remember(&a, b"k1", 9);
        t.remember(&b, b"k2", 9);
        t.flushed([&a, &b].into_iter(), 4);
        assert_eq!(t.totals(), (0, 0));
        assert_eq!(
            *rec.0.lock(),
            vec![(b"x".to_vec(), vec![], 3), (Vec::new(), Vec::new(), 4)]
        );
        t.remember(&a, b"k3", 9);
        assert!(t.shed_one(&a));
        assert!(!t.shed_one(&a));
        assert_eq!(t.totals(), (0, 0));
    }
}
