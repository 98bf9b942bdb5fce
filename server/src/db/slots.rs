//! The keyspace by cluster hash slot: what CLUSTER COUNTKEYSINSLOT and
//! GETKEYSINSLOT read, and what a node drops when a slot it held goes to another.
//!
//! With [`Placement::BySlot`] every key of a slot lives in the slot's shard, so
//! each of these reads one shard — 1/256 of the keys — instead of the whole
//! keyspace. Keys are matched by recomputing their slot: no per-slot index is kept,
//! so the request path pays nothing for these rarely used, operator-driven reads.

use relcache_protocol::slot::key_slot;

use super::{slot_shard, Db, Free, Key, LockMode, Placement, View};

impl Db {
    /// The shards that may hold keys of `slot`, locked in `mode`.
    fn slot_view(&self, slot: u16, mode: LockMode) -> View<'_> {
        match self.placement {
            Placement::BySlot => View::lock(self, &[slot_shard(slot)], mode),
            Placement::Hash => {
                let all: Vec<usize> = (0..super::SHARDS).collect();
                View::lock(self, &all, mode)
            }
        }
    }

    /// Keys in `slot`, expired-but-not-yet-reclaimed ones included (as Redis
    /// counts them).
    pub fn count_in_slot(&self, slot: u16) -> usize {
        let view = self.slot_view(slot, LockMode::Read);
        view.shards()
            .map(|(_, m)| m.iter().filter(|(k, _)| key_slot(k) == slot).count())
            .sum()
    }

    /// Up to `limit` keys of `slot`.
    pub fn keys_in_slot(&self, slot: u16, limit: usize) -> Vec<Key> {
        let view = self.slot_view(slot, LockMode::Read);
        let mut keys = Vec::new();
        for (_, m) in view.shards() {
            for (k, _) in m.iter() {
                if keys.len() >= limit {
                    return keys;
                }
                if key_slot(k) == slot {
                    keys.push(k.clone());
                }
            }
        }
        keys
    }

    /// Revokes the leases out on keys of `slot`: the slot starts moving to
    /// another node (or has gone), so a fill that read the database under one of
    /// them must not be stored here — the write it may have missed would go to the
    /// new owner, not revoke the lease here.
    pub fn revoke_slot_leases(&self, slot: u16) -> super::LeasesEnded {
        if self.leases_out() == 0 {
            return super::LeasesEnded::default();
        }
        let mut view = self.slot_view(slot, LockMode::Write);
        view.revoke_leases_where(|k| key_slot(k) == slot)
    }

    /// Deletes every key of `slot` (the slot now belongs to another node, or
    /// CLUSTER FLUSHSLOTS); returns how many there were. Readers that track them
    /// are told, as for any deletion.
    pub fn drop_slot(&self, slot: u16) -> usize {
        let mut view = self.slot_view(slot, LockMode::Write);
        let keys: Vec<Key> = view
            .shards()
            .flat_map(|(_, m)| m.iter().map(|(k, _)| k))
            .filter(|k| key_slot(k) == slot)
            .cloned()
            .collect();
        // Nobody waits for what a node lets go of with a slot.
        for k in &keys {
            view.delete(k, Free::Later);
        }
        keys.len()
    }
}

impl Db {
    /// Whether `key` holds a live value, without touching its LRU clock.
    pub fn exists(&self, key: &[u8]) -> bool {
        self.view_of(std::iter::once(key), LockMode::Read)
            .peek(key)
            .is_some()
    }
}
