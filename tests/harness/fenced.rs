//! A raw connection for comparing relcache with a real redis-server byte for
//! byte, including what arrives between replies (pub/sub messages, tracking
//! invalidations).
//!
//! [`Conn::text`] follows each request with `PING <fence>` and returns every
//! byte up to and including the fence's reply: whatever the request brought —
//! one reply, several, or pushes after its reply — is in it, in order, and a
//! push that would arrive late makes the comparison fail instead of leaking
//! into the next request's answer.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use relcache_protocol::resp::{parse_frame, Frame, Limits};

use super::resp_cmd;

pub struct Conn {
    /// The socket itself, for tests that read or write around the protocol.
    pub s: TcpStream,
    buf: Vec<u8>,
    fences: u64,
}

impl Conn {
    pub fn new(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Conn {
            s,
            buf: Vec::new(),
            fences: 0,
        }
    }

    pub fn send(&mut self, args: &[&str]) {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.s.write_all(&resp_cmd(&args)).unwrap();
    }

    /// Everything `args` brought, up to and including a fence's reply.
    pub fn text(&mut self, args: &[&str]) -> String {
        self.fences += 1;
        let fence = format!("fence-{}", self.fences);
        self.send(args);
        self.send(&["PING", &fence]);
        let mut out = Vec::new();
        loop {
            while let Some((frame, n)) = self.parsed() {
                out.extend(self.buf.drain(..n));
                if mentions(&frame, fence.as_bytes()) {
                    return String::from_utf8_lossy(&out).into_owned();
                }
            }
            self.fill(args);
        }
    }

    /// The exact bytes of the one reply `args` brings.
    pub fn call(&mut self, args: &[&str]) -> Vec<u8> {
        self.send(args);
        loop {
            if let Some((_, n)) = self.parsed() {
                return self.buf.drain(..n).collect();
            }
            self.fill(args);
        }
    }

    /// [`call`](Self::call) as text.
    pub fn reply(&mut self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.call(args)).into_owned()
    }

    /// The next frame, whatever it is (a message, an invalidation).
    pub fn frame(&mut self) -> Frame {
        loop {
            if let Some((frame, n)) = self.parsed() {
                self.buf.drain(..n);
                return frame;
            }
            self.fill(&[]);
        }
    }

    /// Sets how long [`frame`](Self::frame) and the others wait for bytes.
    pub fn set_timeout(&mut self, t: Duration) {
        self.s.set_read_timeout(Some(t)).unwrap();
    }

    /// Whether a frame is already buffered or arrives within `t`.
    pub fn has_frame_within(&mut self, t: Duration) -> bool {
        if self.parsed().is_some() {
            return true;
        }
        self.s.set_read_timeout(Some(t)).unwrap();
        let mut chunk = [0u8; 16 * 1024];
        let got = match self.s.read(&mut chunk) {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n > 0
            }
            Err(_) => false,
        };
        self.s
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        got
    }

    fn parsed(&self) -> Option<(Frame, usize)> {
        parse_frame(&self.buf, &Limits::default()).expect("a well-formed frame")
    }

    fn fill(&mut self, args: &[&str]) {
        let mut chunk = [0u8; 16 * 1024];
        let n = match self.s.read(&mut chunk) {
            Ok(n) => n,
            Err(e) => panic!("{e} waiting for the reply to {args:?}"),
        };
        assert!(n > 0, "connection closed after {args:?}");
        self.buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends each request to both servers, in order, and asserts the answers are the
/// same bytes; `answer` reads a request's answer (`Conn::text` for everything up
/// to a fence, `Conn::reply` for one reply). `what` names the run in a failure.
pub fn same_answers(
    ours: &mut Conn,
    theirs: &mut Conn,
    requests: &[&[&str]],
    what: &str,
    answer: fn(&mut Conn, &[&str]) -> String,
) {
    for req in requests {
        let want = answer(theirs, req);
        let got = answer(ours, req);
        assert_eq!(got, want, "{what}: answer to {req:?}");
    }
}

fn mentions(frame: &Frame, what: &[u8]) -> bool {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) => &b[..] == what,
        Frame::Array(items) | Frame::Push(items) => items.iter().any(|f| mentions(f, what)),
        _ => false,
    }
}
