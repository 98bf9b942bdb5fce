//! `INFO errorstats`: error replies counted by their code, the first word of the
//! error (`ERR`, `WRONGTYPE`, `NOAUTH`, `OOM` …).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::RwLock;

/// Redis stops adding codes past this many (ERRORSTATS_LIMIT), so a client that
/// invents error codes cannot grow the table.
const MAX_CODES: usize = 128;

/// Counts per error code. A known code costs a shared lock and an atomic add; only
/// a code seen for the first time takes the lock exclusively.
#[derive(Default)]
pub struct ErrorStats {
    codes: RwLock<BTreeMap<Box<str>, AtomicU64>>,
}

/// The code of an error reply's text, as Redis takes it: the text up to the first
/// space within its first 32 bytes, else `ERR`.
pub fn code(text: &[u8]) -> &str {
    let head = &text[..text.len().min(32)];
    head.iter()
        .position(|&b| b == b' ')
        .and_then(|sp| std::str::from_utf8(&head[..sp]).ok())
        .unwrap_or("ERR")
}

impl ErrorStats {
    pub fn record(&self, text: &[u8]) {
        let code = code(text);
        if let Some(n) = self.codes.read().get(code) {
            n.fetch_add(1, Relaxed);
            return;
        }
        let mut codes = self.codes.write();
        if codes.len() >= MAX_CODES && !codes.contains_key(code) {
            return;
        }
        codes.entry(code.into()).or_default().fetch_add(1, Relaxed);
    }

    /// `(code, count)` in code order.
    pub fn counts(&self) -> Vec<(String, u64)> {
        self.codes
            .read()
            .iter()
            .map(|(c, n)| (c.to_string(), n.load(Relaxed)))
            .collect()
    }

    pub fn reset(&self) {
        self.codes.write().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_first_word() {
        assert_eq!(code(b"ERR syntax error"), "ERR");
        assert_eq!(code(b"WRONGTYPE Operation against a key"), "WRONGTYPE");
        assert_eq!(code(b"NOSPACEATALL"), "ERR");
        let e = ErrorStats::default();
        e.record(b"ERR a");
        e.record(b"ERR b");
        e.record(b"NOAUTH x");
        assert_eq!(e.counts(), vec![("ERR".into(), 2), ("NOAUTH".into(), 1)]);
        for i in 0..300 {
            e.record(format!("C{i} x").as_bytes());
        }
        assert_eq!(e.counts().len(), MAX_CODES);
    }
}
