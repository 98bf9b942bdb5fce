//! An in-process driver for fuzz targets: a connection's real decode → dispatch →
//! reply path, with no socket, task or runtime.
//!
//! Built only with the `fuzzing` feature. A [`Harness`] owns one [`Server`]; each
//! [`Client`] is a registered connection with its own [`Session`] and
//! [`RequestDecoder`], so a target can run a hostile session next to an honest one
//! and check that the honest one's data survives. [`Client::feed`] does what one
//! pass of `conn.rs`'s loop does with one read: the query buffer limit, every
//! complete request under the session's current `Limits` (re-set when AUTH, HELLO
//! or RESET change them), Redis's `-ERR Protocol error` and a close on a framing
//! error. What belongs to the socket (output limits, idle timeout, lingering close)
//! is left out. Nothing waits: a command that asks to park is run again at once
//! past its deadline, so it answers as a wait that timed out would.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;

use crate::output::Output;
use relcache_protocol::resp::{Frame, Protocol, Request, RequestDecoder};
use tokio_util::sync::CancellationToken;

use crate::cmd::{self, Flow};
use crate::config::Config;
use crate::conn::limits;
use crate::server::Server;
use crate::session::Session;

/// One server, shared by the clients it hands out.
pub struct Harness {
    server: Arc<Server>,
}

impl Harness {
    /// A server configured by `config`: nothing listens and no background thread
    /// runs (keys expire lazily only).
    pub fn new(config: Config) -> Harness {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 6379));
        let server = Arc::new(Server::new(config, addr, CancellationToken::new()));
        crate::tracking::install(&server);
        Harness { server }
    }

    /// The server's configuration, for CONFIG-level checks.
    pub fn config(&self) -> &Config {
        &self.server.config
    }

    /// A new connection, authenticated already when no password is required.
    pub fn connect(&self) -> Client {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 40000));
        let info = self
            .server
            .clients
            .register(
                addr,
                self.server.local_addr,
                &self.server.shutdown,
                usize::MAX,
            )
            .expect("no client limit");
        let authenticated = self.server.config.requirepass.read().is_none();
        let session = Session::new(info, authenticated);
        let decoder = RequestDecoder::new(limits(&self.server, &session));
        Client {
            server: self.server.clone(),
            session,
            decoder,
            rbuf: BytesMut::new(),
            request: Request::default(),
            closed: false,
        }
    }
}

/// One connection's state between reads.
pub struct Client {
    server: Arc<Server>,
    session: Session,
    decoder: RequestDecoder,
    rbuf: BytesMut,
    request: Request,
    closed: bool,
}

impl Client {
    /// Takes one read of `input` and returns every reply it produced, as the bytes
    /// the connection would write. Once the connection is closed (QUIT, a framing
    /// error, the query buffer limit, CLIENT KILL) input is ignored.
    pub fn feed(&mut self, input: &[u8]) -> Vec<u8> {
        let mut out = Output::default();
        if self.closed || self.session.info.kill.is_cancelled() {
            self.closed = true;
            return Vec::new();
        }
        self.rbuf.extend_from_slice(input);
        let unparsed = self.rbuf.len() + self.decoder.big_buffered().0;
        if unparsed as u64 > self.server.config.client_query_buffer_limit.load(Relaxed) {
            self.closed = true;
            return Vec::new();
        }
        self.decoder.set_limits(limits(&self.server, &self.session));
        while !self.closed {
            match self
                .decoder
                .decode_request(&mut self.rbuf, &mut self.request)
            {
                Ok(true) => {
                    let authenticated = self.session.authenticated;
                    let flow = self.dispatch(&mut out);
                    self.request.consume(&mut self.rbuf);
                    if self.session.authenticated != authenticated {
                        self.decoder.set_limits(limits(&self.server, &self.session));
                    }
                    self.closed = matches!(flow, Flow::Close);
                }
                Ok(false) => break,
                Err(e) => {
                    Frame::error(format!("ERR {e}")).encode(self.session.proto, out.buf());
                    self.closed = true;
                }
            }
        }
        out.to_vec()
    }

    /// Sends one request as a RESP array of bulk strings and returns its replies.
    pub fn call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        self.feed(&req)
    }

    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The protocol its replies are in now (HELLO changes it).
    pub fn protocol(&self) -> Protocol {
        self.session.proto
    }

    /// Runs the request in `request`; a command that parks runs again at once
    /// with its deadline passed, so it gives the answer of a wait that timed out.
    fn dispatch(&mut self, out: &mut Output) -> Flow {
        let (server, session) = (&*self.server, &mut self.session);
        let list: Vec<&[u8]> = self.request.args(&self.rbuf).collect();
        let argv = cmd::Argv::new(&list, self.request.owned());
        let mut flow = cmd::dispatch(server, session, argv, out, None);
        while let Flow::Park(_) = flow {
            flow = cmd::dispatch(server, session, argv, out, Some(Instant::now()));
        }
        flow
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        crate::blocking::set_blocked(&self.server, &self.session.info, false);
        cmd::discard_session_state(&self.server, &mut self.session);
        self.server.clients.unregister(self.session.info.id);
    }
}

/// Feeds `bytes` to the cluster bus decoder (`cluster::wire`), as a peer's
/// stream: it never panics, and a message it accepts encodes back to a frame
/// that decodes to the same message.
pub fn cluster_bus(bytes: &[u8]) {
    use crate::cluster::wire;
    if let Ok(Some((msg, used))) = wire::decode(bytes) {
        assert!(used <= bytes.len());
        let mut again = Vec::new();
        wire::encode(&msg, &mut again);
        assert_eq!(wire::decode(&again), Ok(Some((msg, again.len()))));
    }
}

/// Feeds `text` to the cluster config reader (`cluster::text`): it never panics,
/// and a config it accepts writes back to text that reads back the same.
pub fn cluster_config(text: &str) {
    use crate::cluster::text;
    if let Ok(state) = text::parse(text, 0) {
        let written = text::config(&state);
        assert_eq!(text::parse(&written, 0), Ok(state));
    }
}
