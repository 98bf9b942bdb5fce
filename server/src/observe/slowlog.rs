//! The slow log: the last `slowlog-max-len` commands that took at least
//! `slowlog-log-slower-than` µs, newest first, as Redis keeps them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::cmd::CommandSpec;
use crate::session::ClientInfo;

/// Redis's SLOWLOG_ENTRY_MAX_ARGC and SLOWLOG_ENTRY_MAX_STRING.
const MAX_ARGS: usize = 32;
const MAX_ARG_BYTES: usize = 128;

/// One logged command.
pub struct Entry {
    pub id: u64,
    /// Unix seconds when it was logged.
    pub time: u64,
    pub micros: u64,
    /// Shortened and redacted as Redis shows them.
    pub args: Vec<Bytes>,
    pub addr: String,
    pub name: Bytes,
}

/// The ring, behind a mutex taken only by commands slower than the threshold and
/// by SLOWLOG itself.
#[derive(Default)]
pub struct SlowLog {
    entries: Mutex<VecDeque<Entry>>,
    next_id: AtomicU64,
}

impl SlowLog {
    pub fn push(
        &self,
        max_len: u64,
        client: &ClientInfo,
        spec: &CommandSpec,
        args: &[&[u8]],
        micros: u64,
    ) {
        if max_len == 0 {
            return;
        }
        let shown = args.len().min(MAX_ARGS);
        let mut kept: Vec<Bytes> = (0..shown)
            .map(|i| {
                let a = &args[i];
                if super::redacted(spec, args, i) {
                    Bytes::from_static(b"(redacted)")
                } else if a.len() > MAX_ARG_BYTES {
                    let mut s = a[..MAX_ARG_BYTES].to_vec();
                    s.extend_from_slice(
                        format!("... ({} more bytes)", a.len() - MAX_ARG_BYTES).as_bytes(),
                    );
                    Bytes::from(s)
                } else {
                    // A copy: a slice would keep the whole request's buffer (a
                    // 5M-id SADD's 70 MB) alive for as long as the entry.
                    Bytes::copy_from_slice(a)
                }
            })
            .collect();
        if shown < args.len() {
            kept[MAX_ARGS - 1] = Bytes::from(format!(
                "... ({} more arguments)",
                args.len() - MAX_ARGS + 1
            ));
        }
        let entry = Entry {
            id: self.next_id.fetch_add(1, Relaxed),
            time: super::unix_now().0,
            micros,
            args: kept,
            addr: client.addr.to_string(),
            name: client.name.lock().clone().unwrap_or_default(),
        };
        let mut entries = self.entries.lock();
        entries.push_front(entry);
        entries.truncate(max_len as usize);
    }

    /// Calls `f` with up to `count` newest entries (all with `None`).
    pub fn with_newest<R>(
        &self,
        count: Option<usize>,
        f: impl FnOnce(&mut dyn Iterator<Item = &Entry>) -> R,
    ) -> R {
        let entries = self.entries.lock();
        let n = count.unwrap_or(entries.len());
        f(&mut entries.iter().take(n))
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// SLOWLOG RESET: the entries go; ids keep counting, as in Redis.
    pub fn reset(&self) {
        self.entries.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::registry;

    fn client() -> std::sync::Arc<ClientInfo> {
        let clients = crate::session::Clients::default();
        let addr = "127.0.0.1:1".parse().unwrap();
        clients
            .register(addr, addr, &Default::default(), 10)
            .unwrap()
    }

    #[test]
    fn shortens_like_redis_and_keeps_the_newest() {
        let log = SlowLog::default();
        let (_, set) = registry().get(b"set").unwrap();
        let owned: Vec<Vec<u8>> = (0..40).map(|i| format!("a{i}").into_bytes()).collect();
        let long = vec![b'x'; 130];
        let mut args: Vec<&[u8]> = vec![b"set"];
        args.extend(owned.iter().map(|a| &a[..]));
        args[1] = &long;
        let c = client();
        log.push(2, &c, set, &args, 5);
        let (_, auth) = registry().get(b"auth").unwrap();
        log.push(2, &c, auth, &[b"auth", b"pw"], 6);
        log.push(2, &c, auth, &[b"auth", b"pw"], 7);
        assert_eq!(log.len(), 2);
        log.with_newest(None, |it| {
            let e: Vec<&Entry> = it.collect();
            assert_eq!((e[0].id, e[1].id), (2, 1));
            assert_eq!(&e[0].args[1][..], b"(redacted)");
        });
        log.reset();
        log.push(5, &c, set, &args, 5);
        log.with_newest(Some(1), |it| {
            let e = it.next().unwrap();
            assert_eq!(e.id, 3);
            assert_eq!(e.args.len(), 32);
            assert_eq!(&e.args[31][..], b"... (10 more arguments)");
            assert!(e.args[1].ends_with(b"... (2 more bytes)"));
            assert_eq!(e.args[1].len(), 128 + 18);
        });
    }
}
