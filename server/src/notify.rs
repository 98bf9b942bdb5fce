//! Keyspace notifications (`notify-keyspace-events`): what a write did to a key,
//! published on `__keyspace@0__:<key>` (the event as message) and
//! `__keyevent@0__:<event>` (the key as message), as Redis 7 does.
//!
//! Commands report events through `Ctx::notify`; keys the keyspace removes on its
//! own (expired, evicted) come back from the db layer, as a view's list of the
//! expired keys it met or through a callback of the sweep and the evictor, and
//! the server layer publishes them here, so the db layer stays free of pub/sub.
//! Events are published while the key's shard is still locked where that is
//! possible (commands, the sweep), so subscribers see a key's events in the order
//! they happened: the lock order is shard, then the pub/sub registry, never the
//! reverse. With the
//! parameter empty (the default) an event costs one relaxed load of [`Flags`]:
//! nothing is formatted or allocated.
//!
//! Classes are Redis's letters. relcache has no lists, hashes, sorted sets,
//! streams or modules, so `l`, `h`, `z`, `t` and `d` are accepted (a client
//! configuring `KEA` or `Kl` gets what Redis would give it for the types relcache
//! has) but no event is ever in them. `m` (key misses) is accepted and publishes
//! nothing: a read takes its shards shared, and a miss published from the read
//! path would cost every GET; see the README.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::server::Server;

/// `K`: `__keyspace@0__:<key>` channels.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: `__keyevent@0__:<event>` channels.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: type-independent commands (DEL, EXPIRE, RENAME, COPY, PERSIST …).
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
pub const LIST: u32 = 1 << 4;
/// `s`: set commands, the IDSET.* writes included (an idset is a set).
pub const SET: u32 = 1 << 5;
pub const HASH: u32 = 1 << 6;
pub const ZSET: u32 = 1 << 7;
/// `x`: a key removed because its time to live ran out.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: a key evicted under `maxmemory`.
pub const EVICTED: u32 = 1 << 9;
pub const STREAM: u32 = 1 << 10;
/// `m`: excluded from `A`, as in Redis.
pub const KEY_MISS: u32 = 1 << 11;
pub const MODULE: u32 = 1 << 13;
/// `n`: a key created; excluded from `A`, as in Redis.
pub const NEW: u32 = 1 << 14;
/// `A`: every class but `m` and `n`.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// Letters in the order Redis's error message lists them.
const LETTERS: &str = "Ag$lshzxeKEtmdn";

/// The configured classes, read on every write.
#[derive(Default)]
pub struct Flags(AtomicU32);

impl Flags {
    pub fn get(&self) -> u32 {
        self.0.load(Relaxed)
    }

    /// Sets the classes from the parameter's text; Redis's error for a bad letter.
    pub fn set(&self, text: &str) -> Result<(), String> {
        self.0.store(parse(text)?, Relaxed);
        Ok(())
    }

    /// The parameter as CONFIG GET shows it (Redis's normal form).
    pub fn text(&self) -> String {
        format(self.get())
    }
}

/// The classes named by `text`.
pub fn parse(text: &str) -> Result<u32, String> {
    text.chars().try_fold(0, |flags, c| {
        let class = match c {
            'A' => ALL,
            'g' => GENERIC,
            '$' => STRING,
            'l' => LIST,
            's' => SET,
            'h' => HASH,
            'z' => ZSET,
            'x' => EXPIRED,
            'e' => EVICTED,
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            't' => STREAM,
            'm' => KEY_MISS,
            'd' => MODULE,
            'n' => NEW,
            _ => return Err(format!("Invalid event class character. Use '{LETTERS}'.")),
        };
        Ok(flags | class)
    })
}

/// Redis's normal form: `A` when it covers every class, else the letters of the
/// classes in a fixed order, then `K`, `E`, `m`.
pub fn format(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        let classes = [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ];
        s.extend(
            classes
                .iter()
                .filter(|(f, _)| flags & f != 0)
                .map(|(_, c)| c),
        );
    }
    for (f, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & f != 0 {
            s.push(c);
        }
    }
    s
}

/// Publishes `event` on `key` if its class is configured. The check is all a write
/// pays while notifications are off.
#[inline]
pub fn event(server: &Server, class: u32, event: &'static str, key: &[u8]) {
    let flags = server.config.notify_keyspace_events.get();
    if flags & class != 0 {
        publish(server, flags, event, key);
    }
}

/// [`event`] for each of `keys` (expired or evicted keys the db layer handed back).
pub fn events<'k>(
    server: &Server,
    class: u32,
    name: &'static str,
    keys: impl IntoIterator<Item = &'k [u8]>,
) {
    let flags = server.config.notify_keyspace_events.get();
    if flags & class != 0 {
        for key in keys {
            publish(server, flags, name, key);
        }
    }
}

#[cold]
fn publish(server: &Server, flags: u32, event: &'static str, key: &[u8]) {
    if flags & KEYSPACE != 0 {
        let channel = [&b"__keyspace@0__:"[..], key].concat();
        crate::pubsub::publish(server, &channel, event.as_bytes());
    }
    if flags & KEYEVENT != 0 {
        let channel = [&b"__keyevent@0__:"[..], event.as_bytes()].concat();
        crate::pubsub::publish(server, &channel, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_print_in_redis_normal_form() {
        // Each pair checked against redis-server 7.0.15's CONFIG GET.
        for (set, get) in [
            ("KEA", "AKE"),
            ("Ex", "xE"),
            ("AKEm", "AKEm"),
            ("gs$", "g$s"),
            ("nd", "dn"),
            ("Kgg", "gK"),
            ("", ""),
            ("KA", "AK"),
            ("Ag$lshzxeKEtmdn", "AKEm"),
            ("g$lshzxetd", "A"),
        ] {
            assert_eq!(format(parse(set).unwrap()), get, "{set:?}");
        }
    }

    #[test]
    fn a_letter_redis_does_not_know_is_refused() {
        for bad in ["xyz", "k", "KE ", "a"] {
            assert_eq!(
                parse(bad).unwrap_err(),
                "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."
            );
        }
    }
}
