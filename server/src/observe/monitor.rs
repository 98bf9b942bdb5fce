//! MONITOR: the registry of monitoring connections and the feed to them.
//!
//! MONITOR gives its connection a [`Feed`], the receiving end of a channel; every
//! command other clients run afterwards is formatted once, as Redis formats it
//! (`+<unix>.<µs> [0 <addr>] "cmd" "arg" …`), and sent to each feed. The
//! connection's event loop appends what arrives to its output like any reply, so a monitor
//! that stops reading is held to `client-output-buffer-limit` like any client.
//! Dropping the feed (disconnect, RESET) ends the subscription; the registry
//! forgets a feed the next time a send to it fails.

use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::cmd::CommandSpec;
use crate::config::Config;
use crate::server::Server;
use crate::session::{ClientInfo, Session};

/// What a monitoring connection receives: one formatted line per command.
pub type Feed = mpsc::UnboundedReceiver<Bytes>;

/// The monitoring connections, by client id.
#[derive(Default)]
pub struct Monitors {
    subs: Mutex<Vec<(u64, mpsc::UnboundedSender<Bytes>)>>,
}

impl Monitors {
    /// Makes `session` a monitor (again, with a fresh feed, if it already was).
    pub fn start(&self, server: &Server, session: &mut Session) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut subs = self.subs.lock();
        subs.retain(|(id, _)| *id != session.id());
        subs.push((session.id(), tx));
        session.monitor = Some(rx);
        server
            .config
            .observe_gate
            .set_monitoring(&server.config, true);
    }

    /// Sends one command to every monitor.
    pub fn feed(&self, config: &Config, client: &ClientInfo, spec: &CommandSpec, args: &[&[u8]]) {
        let line = format_line(client, spec, args);
        let mut subs = self.subs.lock();
        subs.retain(|(_, tx)| tx.send(line.clone()).is_ok());
        if subs.is_empty() {
            config.observe_gate.set_monitoring(config, false);
        }
    }

    fn remove(&self, config: &Config, id: u64) {
        let mut subs = self.subs.lock();
        subs.retain(|(sub, _)| *sub != id);
        if subs.is_empty() {
            config.observe_gate.set_monitoring(config, false);
        }
    }
}

/// Ends monitoring for this connection (RESET), if it was monitoring.
pub fn stop(server: &Server, session: &mut Session) {
    if session.monitor.take().is_some() {
        server.observe.monitors.remove(&server.config, session.id());
    }
}

/// The next line for this connection, polled with its event loop's waker
/// ([`crate::evloop`]); `Ready(None)` once the registry dropped the sender, and
/// `Pending` without a feed.
pub fn poll_next(feed: &mut Option<Feed>, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
    match feed {
        Some(rx) => rx.poll_recv(cx),
        None => Poll::Pending,
    }
}

/// Appends a received line, and whatever else is already waiting, to the
/// connection's output; `None` (the registry dropped the sender) ends the feed.
pub fn deliver(line: Option<Bytes>, feed: &mut Option<Feed>, out: &mut BytesMut) {
    let Some(line) = line else {
        *feed = None;
        return;
    };
    out.extend_from_slice(&line);
    if let Some(rx) = feed {
        // Bounded per wake-up, so a busy server cannot keep this connection from
        // writing (and from being checked against its output limit).
        for _ in 0..1024 {
            match rx.try_recv() {
                Ok(line) => out.extend_from_slice(&line),
                Err(_) => break,
            }
        }
    }
}

/// `+1700000000.123456 [0 127.0.0.1:5000] "set" "k" "v"\r\n`.
fn format_line(client: &ClientInfo, spec: &CommandSpec, args: &[&[u8]]) -> Bytes {
    let (secs, micros) = super::unix_now();
    let mut out = Vec::with_capacity(48 + args.iter().map(|a| a.len() + 3).sum::<usize>());
    out.extend_from_slice(format!("+{secs}.{micros:06} [0 {}]", client.addr).as_bytes());
    for (i, a) in args.iter().enumerate() {
        out.push(b' ');
        if super::redacted(spec, args, i) {
            out.extend_from_slice(b"\"(redacted)\"");
        } else {
            quote(a, &mut out);
        }
    }
    out.extend_from_slice(b"\r\n");
    Bytes::from(out)
}

/// Redis's `sdscatrepr`: a double-quoted string with C escapes and `\xHH` for
/// bytes that are not printable ASCII.
pub fn quote(s: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    for &b in s {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_like_sdscatrepr() {
        let mut out = Vec::new();
        quote("a\"b\\c\nd é\t\x07".as_bytes(), &mut out);
        assert_eq!(out, b"\"a\\\"b\\\\c\\nd \\xc3\\xa9\\t\\a\"");
    }

    #[test]
    fn lines_redact_credentials() {
        let clients = crate::session::Clients::default();
        let addr = "127.0.0.1:7".parse().unwrap();
        let c = clients
            .register(addr, addr, &Default::default(), 1)
            .unwrap();
        let reg = crate::cmd::registry();
        let args = crate::cmd::test_args(&["HELLO", "3", "AUTH", "u", "p", "SETNAME", "n"]);
        let line = format_line(&c, reg.get(b"hello").unwrap().1, &args);
        let text = String::from_utf8(line.to_vec()).unwrap();
        assert!(text.starts_with('+') && text.ends_with("\r\n"));
        assert!(text.contains(
            "[0 127.0.0.1:7] \"HELLO\" \"3\" \"AUTH\" \"(redacted)\" \"(redacted)\" \"SETNAME\" \"n\""
        ));
    }
}
