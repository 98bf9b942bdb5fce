//! An async client for relcache, or any server that speaks RESP, on tokio.
//!
//! A [`Client`] owns one connection and has one request on it at a time: a single
//! command with [`Client::cmd`], or a batch written at once with
//! [`Client::pipeline`], whose replies come back in order. Replies are
//! [`Frame`]s, parsed incrementally (a reply arriving over many reads is parsed once)
//! and within [`Limits`].
//!
//! On top of that:
//! - [`Cmd`] is a typed command: its arguments and how to read its reply, so the
//!   IDSET family answers `Option<bool>` or `Vec<u64>` instead of frames, on a
//!   [`Client`] or a [`Pool`], alone or pipelined. [`build_table`] builds the table
//!   that `IDSET.LOAD … TABLE` stores.
//! - [`Pool`] shares a bounded set of connections between tasks, with connect and
//!   command timeouts; a connection that fails or times out is dropped and the next
//!   call opens a new one.
//!
//! - [`Tracker`] keeps a listener connection for the server's key-tracking
//!   invalidations (`CLIENT TRACKING … REDIRECT`) and a pool whose connections
//!   send theirs to it, for a caller that caches what it reads.
//!
//! - [`ClusterPool`] routes commands over a Redis Cluster by hash slot, one
//!   [`Pool`] per node, following `-MOVED` and `-ASK`.
//!
//! There is no retry (but for cluster redirects) and no general pub/sub: RESP3 push frames
//! (`>`) are out-of-band data and are dropped (a `tracking-redir-broken` push is
//! noted: [`Client::tracking_redirect_broken`]).
//!
//! ```no_run
//! use relcache_client::{Client, Frame};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), relcache_client::Error> {
//! let mut client = Client::connect("127.0.0.1:6379").await?;
//! client.cmd(&["SET", "greeting", "hello"]).await?;
//! assert_eq!(client.cmd(&["GET", "greeting"]).await?, Frame::bulk("hello"));
//! # Ok(())
//! # }
//! ```
//!
//! # Errors and cancellation
//!
//! An error reply to [`cmd`](Client::cmd) is [`Error::Server`]; in a
//! [`pipeline`](Client::pipeline) it is a [`Frame::Error`] in its place, so that one
//! failed command does not hide the replies to the others. Every other error, and
//! dropping a call's future before it completes (a timeout, say), leaves the
//! connection out of step with the server: every later call fails with
//! [`Error::Closed`], and the caller connects again.

mod cluster;
mod commands;
mod error;
mod pool;
pub mod tracking;

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpStream, ToSocketAddrs};
use tokio_util::io::poll_read_buf;

pub use cluster::{ClusterConfig, ClusterPool};
pub use commands::{build_table, Cmd, LeaseOpts, Leased, LoadOpts};
pub use error::Error;
pub use pool::{Pool, PoolConfig, PoolStatus, PooledConn};
pub use relcache_protocol::idset::Builder as TableBuilder;
use relcache_protocol::resp::{reply::ReplyDecoder, write_array_header, write_bulk};
pub use relcache_protocol::resp::{Frame, Limits, Protocol};
pub use tracking::{Invalidation, TrackedSession, Tracker, TrackingConfig};

/// How much room to make in the read buffer before each read.
const READ_CHUNK: usize = 16 * 1024;

/// Buffers grown past this by one large request or reply are given back once empty.
const KEEP_BUFFER: usize = 1024 * 1024;

/// One connection to a RESP server.
///
/// `S` is the byte stream: a [`TcpStream`] from [`connect`](Client::connect), or
/// anything else that reads and writes (a TLS stream, a Unix socket, an in-memory
/// duplex in tests) through [`new`](Client::new).
#[derive(Debug)]
pub struct Client<S = TcpStream> {
    stream: S,
    read_buf: BytesMut,
    write_buf: BytesMut,
    decoder: ReplyDecoder,
    protocol: Protocol,
    /// False from the start of a round trip until it ends well. Still false at the
    /// start of the next one means the last failed, or its future was dropped
    /// midway, and replies may be owed: the connection is unusable.
    usable: bool,
    /// Bytes read in the current round trip. `read_buf.capacity()` counts only
    /// what lies past the replies already split off, so it cannot tell by itself
    /// whether the allocation grew large.
    read_this_trip: usize,
    /// The server process's `run_id`, once asked ([`server_run_id`](Self::server_run_id)).
    run_id: Option<Arc<str>>,
    /// A `tracking-redir-broken` push came in: the connection tracking its keys
    /// for this one is gone (see [`tracking_redirect_broken`](Self::tracking_redirect_broken)).
    redirect_broken: bool,
}

impl Client<TcpStream> {
    /// Connects over TCP, with Nagle's algorithm off (requests are written whole).
    /// The connection speaks RESP2 until [`hello`](Self::hello) says otherwise.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the address does not resolve or the connection fails.
    pub async fn connect(addr: impl ToSocketAddrs) -> Result<Self, Error> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Client::new(stream))
    }

    /// Whether an idle connection still looks open, without a round trip: a server
    /// that closed it (idle `timeout`, CLIENT KILL, restart) has sent a FIN the
    /// socket already holds, and a pool should not hand that connection out to fail
    /// the caller's next command. Any byte waiting to be read also disqualifies it:
    /// nothing is owed on an idle connection.
    pub(crate) fn looks_open(&self) -> bool {
        if !self.usable || !self.read_buf.is_empty() {
            return false;
        }
        let mut byte = [0u8; 1];
        matches!(self.stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// A client over an established stream, with default [`Limits`], speaking RESP2.
    pub fn new(stream: S) -> Self {
        Client {
            stream,
            read_buf: BytesMut::with_capacity(READ_CHUNK),
            write_buf: BytesMut::new(),
            decoder: ReplyDecoder::new(Limits::default()),
            protocol: Protocol::Resp2,
            usable: true,
            read_this_trip: 0,
            run_id: None,
            redirect_broken: false,
        }
    }

    /// Replaces the limits replies are parsed under (longest bulk, largest
    /// aggregate, deepest nesting).
    pub fn set_limits(&mut self, limits: Limits) {
        self.decoder.set_limits(limits);
    }

    /// The protocol version negotiated with [`hello`](Self::hello); RESP2 before.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The `run_id` of the server process this connection talks to (`INFO server`),
    /// asked on first use and remembered. No connection outlives a server restart,
    /// and a restarted server has a new run id, so this tells which process — and
    /// so which dataset — a connection reaches.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run); [`Error::UnexpectedReply`] if INFO has no `run_id`.
    pub async fn server_run_id(&mut self) -> Result<Arc<str>, Error> {
        if let Some(id) = &self.run_id {
            return Ok(id.clone());
        }
        let fields = self.run(Cmd::info("server")).await?;
        let id: Arc<str> = fields
            .into_iter()
            .find(|(k, _)| k == "run_id")
            .map(|(_, v)| v.into())
            .ok_or_else(|| Error::UnexpectedReply("INFO server has no run_id".into()))?;
        self.run_id = Some(id.clone());
        Ok(id)
    }

    /// Sends one command, its name first, and returns the reply.
    ///
    /// ```no_run
    /// # async fn example(client: &mut relcache_client::Client) -> Result<(), relcache_client::Error> {
    /// use relcache_client::Frame;
    ///
    /// let key = b"counter".to_vec();
    /// assert_eq!(client.cmd(&[&b"INCR"[..], &key]).await?, Frame::Integer(1));
    /// let err = client.cmd(&["LPUSH", "counter", "x"]).await.unwrap_err();
    /// assert_eq!(err.code(), Some("WRONGTYPE"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`Error::Server`] if the server answers with an error reply; the connection
    ///   stays usable.
    /// - [`Error::EmptyCommand`] if `args` is empty; nothing is sent.
    /// - [`Error::Io`], [`Error::Protocol`] or [`Error::Closed`] if the connection
    ///   failed, or had already (see the [crate docs](crate#errors-and-cancellation)).
    pub async fn cmd(&mut self, args: &[impl AsRef<[u8]>]) -> Result<Frame, Error> {
        if args.is_empty() {
            return Err(Error::EmptyCommand);
        }
        self.write_buf.clear();
        encode_command(&mut self.write_buf, args);
        let reply = self.round_trip(1).await?.pop().expect("one reply");
        match reply {
            Frame::Error(text) => Err(Error::Server(String::from_utf8_lossy(&text).into_owned())),
            reply => Ok(reply),
        }
    }

    /// Sends a batch of commands in one write and returns their replies, in order.
    ///
    /// An error reply is returned in its place as a [`Frame::Error`]; use
    /// [`Frame::is_error`] to find them.
    ///
    /// ```no_run
    /// # async fn example(client: &mut relcache_client::Client) -> Result<(), relcache_client::Error> {
    /// use bytes::Bytes;
    /// use relcache_client::Frame;
    ///
    /// let cmd = |args: &[&'static str]| args.iter().map(|a| Bytes::from(*a)).collect();
    /// let replies = client
    ///     .pipeline(&[cmd(&["SET", "a", "1"]), cmd(&["GET", "a"]), cmd(&["NOSUCH"])])
    ///     .await?;
    /// assert_eq!(replies[0], Frame::ok());
    /// assert_eq!(replies[1], Frame::bulk("1"));
    /// assert!(replies[2].is_error());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// - [`Error::EmptyCommand`] if any command is empty; nothing is sent.
    /// - [`Error::Io`], [`Error::Protocol`] or [`Error::Closed`] if the connection
    ///   failed, or had already; the replies read before the failure are lost.
    pub async fn pipeline(&mut self, cmds: &[Vec<Bytes>]) -> Result<Vec<Frame>, Error> {
        if cmds.iter().any(Vec::is_empty) {
            return Err(Error::EmptyCommand);
        }
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        self.write_buf.clear();
        for args in cmds {
            encode_command(&mut self.write_buf, args);
        }
        self.round_trip(cmds.len()).await
    }

    /// Sends `HELLO <version>`, switching the connection to RESP3 (3) or back to
    /// RESP2 (2), and returns the server's description of itself (a map in RESP3).
    ///
    /// # Errors
    ///
    /// [`Error::Server`] with code `NOPROTO` if the server does not speak that
    /// version; otherwise as [`cmd`](Self::cmd).
    pub async fn hello(&mut self, version: u8) -> Result<Frame, Error> {
        let reply = self
            .cmd(&[b"HELLO".as_slice(), version.to_string().as_bytes()])
            .await?;
        self.protocol = if version >= 3 {
            Protocol::Resp3
        } else {
            Protocol::Resp2
        };
        Ok(reply)
    }

    /// Whether the connection can take another call: false once a call failed with
    /// anything but a server error, or was dropped before it finished, since
    /// replies may then be owed (see the [crate docs](crate#errors-and-cancellation)).
    /// A [`Pool`] takes back only usable connections.
    pub fn is_usable(&self) -> bool {
        self.usable
    }

    /// Consumes the client, returning the stream.
    pub fn into_inner(self) -> S {
        self.stream
    }

    /// Consumes the client, returning the stream and whatever was read from it
    /// past the last reply, for a caller that reads the stream itself from here on
    /// (a subscriber, say, whose messages may have followed its last reply).
    pub fn into_parts(self) -> (S, BytesMut) {
        (self.stream, self.read_buf)
    }

    /// Whether the server said (a RESP3 `tracking-redir-broken` push) that the
    /// connection this one sends its key-tracking invalidations to is gone: any
    /// invalidation since may have been lost, so whatever was cached on the
    /// strength of this connection's tracking is no longer kept correct. Only a
    /// RESP3 connection is told; a RESP2 one loses the invalidations silently.
    pub fn tracking_redirect_broken(&self) -> bool {
        self.redirect_broken
    }

    /// Writes `self.write_buf` and reads `replies` replies.
    async fn round_trip(&mut self, replies: usize) -> Result<Vec<Frame>, Error> {
        if !self.usable {
            return Err(Error::Closed);
        }
        self.usable = false;
        self.read_this_trip = 0;
        self.write_request().await?;
        if self.write_buf.capacity() > KEEP_BUFFER {
            self.write_buf = BytesMut::new();
        }
        let mut frames = Vec::with_capacity(replies);
        while frames.len() < replies {
            frames.push(self.read_reply().await?);
        }
        let large = self.read_buf.capacity().max(self.read_this_trip) > KEEP_BUFFER;
        if self.read_buf.is_empty() && large {
            self.read_buf = BytesMut::with_capacity(READ_CHUNK);
        }
        self.usable = true;
        Ok(frames)
    }

    /// Writes `self.write_buf` whole. Whenever the write blocks, reads whatever has
    /// arrived into `self.read_buf`: a long pipeline must not deadlock against a
    /// server that stops reading requests while its replies go unread.
    async fn write_request(&mut self) -> Result<(), Error> {
        let Client {
            stream,
            write_buf,
            read_buf,
            read_this_trip,
            ..
        } = self;
        let mut written = 0;
        std::future::poll_fn(|cx| loop {
            while written < write_buf.len() {
                match Pin::new(&mut *stream).poll_write(cx, &write_buf[written..]) {
                    Poll::Ready(Ok(0)) => return Poll::Ready(Err(Error::Closed)),
                    Poll::Ready(Ok(n)) => written += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                    Poll::Pending => break,
                }
            }
            if written == write_buf.len() {
                return Pin::new(&mut *stream).poll_flush(cx).map_err(Error::from);
            }
            read_buf.reserve(READ_CHUNK);
            match poll_read_buf(Pin::new(&mut *stream), cx, read_buf) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(Error::Closed)),
                Poll::Ready(Ok(n)) => *read_this_trip += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => return Poll::Pending,
            }
        })
        .await
    }

    /// Reads the next reply, skipping push frames (noting only a broken tracking
    /// redirect).
    async fn read_reply(&mut self) -> Result<Frame, Error> {
        loop {
            while let Some(frame) = self.decoder.decode(&mut self.read_buf)? {
                match frame {
                    Frame::Push(items) => {
                        if matches!(items.first(), Some(Frame::Bulk(kind) | Frame::Simple(kind)) if kind.eq_ignore_ascii_case(b"tracking-redir-broken"))
                        {
                            self.redirect_broken = true;
                        }
                    }
                    frame => return Ok(frame),
                }
            }
            self.read_buf.reserve(READ_CHUNK);
            match self.stream.read_buf(&mut self.read_buf).await? {
                0 => return Err(Error::Closed),
                n => self.read_this_trip += n,
            }
        }
    }
}

/// Appends a command as a RESP array of bulk strings (requests have this shape in
/// both protocol versions).
fn encode_command(out: &mut BytesMut, args: &[impl AsRef<[u8]>]) {
    write_array_header(out, args.len());
    for arg in args {
        write_bulk(out, arg.as_ref());
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use relcache_protocol::resp::RequestDecoder;
    use tokio::io::{duplex, AsyncWriteExt, DuplexStream};

    use super::*;

    /// A fake server on the other end of an in-memory pipe whose buffer holds only
    /// `pipe` bytes, so replies arrive in small pieces. `reply` answers each request
    /// with raw bytes; the server stops when the client goes away.
    fn fake_server(
        pipe: usize,
        mut reply: impl FnMut(&[Bytes]) -> Vec<u8> + Send + 'static,
    ) -> Client<DuplexStream> {
        let (client, mut server) = duplex(pipe);
        tokio::spawn(async move {
            let mut decoder = RequestDecoder::default();
            let mut buf = BytesMut::new();
            let mut args = Vec::new();
            loop {
                while decoder.decode(&mut buf, &mut args).unwrap() {
                    let out = reply(&args);
                    if server.write_all(&out).await.is_err() {
                        return;
                    }
                }
                match server.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        });
        Client::new(client)
    }

    /// Replies with the request's arguments as an array of bulk strings, except
    /// `FAIL`, which gets an error reply.
    fn echo(args: &[Bytes]) -> Vec<u8> {
        if args[0] == "FAIL" {
            return Frame::error("ERR failed as asked")
                .to_bytes(Protocol::Resp2)
                .to_vec();
        }
        let frame = Frame::Array(args.iter().cloned().map(Frame::Bulk).collect());
        frame.to_bytes(Protocol::Resp2).to_vec()
    }

    fn cmd(args: &[&str]) -> Vec<Bytes> {
        args.iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    fn bulks(args: &[&str]) -> Frame {
        Frame::Array(args.iter().map(|a| Frame::bulk(a.to_string())).collect())
    }

    #[tokio::test]
    async fn cmd_round_trips_through_small_reads() {
        let mut client = fake_server(7, echo);
        let reply = client
            .cmd(&["SET", "key", "a value\r\nwith CRLF"])
            .await
            .unwrap();
        assert_eq!(reply, bulks(&["SET", "key", "a value\r\nwith CRLF"]));
        let big = "x".repeat(100_000);
        assert_eq!(
            client.cmd(&["GET", &big]).await.unwrap(),
            bulks(&["GET", &big])
        );
    }

    #[tokio::test]
    async fn server_errors_keep_the_connection() {
        let mut client = fake_server(64, echo);
        let err = client.cmd(&["FAIL"]).await.unwrap_err();
        assert!(err.is_server());
        assert_eq!(err.code(), Some("ERR"));
        assert_eq!(client.cmd(&["PING"]).await.unwrap(), bulks(&["PING"]));
    }

    #[tokio::test]
    async fn pipeline_replies_in_order_with_errors_in_place() {
        let mut client = fake_server(1024, echo);
        let cmds = vec![cmd(&["A", "1"]), cmd(&["FAIL"]), cmd(&["B", ""])];
        let replies = client.pipeline(&cmds).await.unwrap();
        assert_eq!(
            replies,
            [
                bulks(&["A", "1"]),
                Frame::error("ERR failed as asked"),
                bulks(&["B", ""])
            ]
        );
        assert_eq!(client.pipeline(&[]).await.unwrap(), []);
        let many: Vec<Vec<Bytes>> = (0..1000).map(|i| cmd(&["N", &i.to_string()])).collect();
        // Far more than the pipe holds either way: the client must read replies
        // while it is still writing, since the server stops reading while blocked.
        let replies = client.pipeline(&many).await.unwrap();
        assert_eq!(replies.len(), 1000);
        assert_eq!(replies[999], bulks(&["N", "999"]));
    }

    #[tokio::test]
    async fn empty_commands_are_refused_before_sending() {
        let mut client = fake_server(64, echo);
        let none: &[&str] = &[];
        assert!(matches!(client.cmd(none).await, Err(Error::EmptyCommand)));
        let cmds = vec![cmd(&["A"]), vec![]];
        assert!(matches!(
            client.pipeline(&cmds).await,
            Err(Error::EmptyCommand)
        ));
        assert_eq!(client.cmd(&["A"]).await.unwrap(), bulks(&["A"]));
    }

    #[tokio::test]
    async fn hello_switches_to_resp3_and_pushes_are_skipped() {
        let mut resp3 = false;
        let mut client = fake_server(64, move |args| {
            if args[0] == "HELLO" {
                resp3 = args[1] == "3";
                let map = Frame::Map(vec![(Frame::bulk("proto"), Frame::Integer(3))]);
                return map.to_bytes(Protocol::Resp3).to_vec();
            }
            assert!(resp3);
            let mut out = Frame::Push(vec![Frame::bulk("invalidate")])
                .to_bytes(Protocol::Resp3)
                .to_vec();
            out.extend_from_slice(&Frame::Boolean(true).to_bytes(Protocol::Resp3));
            out
        });
        assert_eq!(client.protocol(), Protocol::Resp2);
        let hello = client.hello(3).await.unwrap();
        assert!(matches!(hello, Frame::Map(_)));
        assert_eq!(client.protocol(), Protocol::Resp3);
        assert_eq!(client.cmd(&["X"]).await.unwrap(), Frame::Boolean(true));
    }

    #[tokio::test]
    async fn a_closed_connection_stays_closed() {
        // The server answers the first command, half the second, and hangs up.
        let (near, mut far) = duplex(64);
        tokio::spawn(async move {
            let mut buf = BytesMut::new();
            far.read_buf(&mut buf).await.unwrap();
            far.write_all(b"+OK\r\n$5\r\nab").await.unwrap();
        });
        let mut client = Client::new(near);
        let err = client
            .pipeline(&[cmd(&["A"]), cmd(&["B"])])
            .await
            .unwrap_err();
        assert!(err.is_closed(), "{err}");
        assert!(client.cmd(&["PING"]).await.unwrap_err().is_closed());
    }

    #[tokio::test]
    async fn garbage_is_a_protocol_error() {
        let mut client = fake_server(64, |_| b"?what\r\n".to_vec());
        assert!(client.cmd(&["PING"]).await.unwrap_err().is_protocol());
        assert!(client.cmd(&["PING"]).await.unwrap_err().is_closed());
    }

    #[tokio::test]
    async fn a_cancelled_call_leaves_the_client_unusable() {
        // The server never answers.
        let mut client = fake_server(64, |_| Vec::new());
        let call = client.cmd(&["BLPOP", "q", "0"]);
        assert!(poll_once(call).await.is_none());
        assert!(client.cmd(&["PING"]).await.unwrap_err().is_closed());
    }

    #[tokio::test]
    async fn a_buffer_grown_by_a_large_reply_is_given_back() {
        // Replies of a few sizes past the limit: whatever the reply leaves of the
        // allocation after it, the allocation itself is dropped once it is read.
        for size in [
            KEEP_BUFFER + 1,
            2 * KEEP_BUFFER + 40_000,
            4 * KEEP_BUFFER - 7,
        ] {
            let mut client = fake_server(64 * 1024, move |_| {
                Frame::bulk(vec![b'x'; size])
                    .to_bytes(Protocol::Resp2)
                    .to_vec()
            });
            let reply = client.cmd(&["GET", "big"]).await.unwrap();
            assert!(matches!(&reply, Frame::Bulk(b) if b.len() == size));
            drop(reply);
            assert!(
                client.read_buf.capacity() <= READ_CHUNK,
                "{size}-byte reply left {} bytes of buffer",
                client.read_buf.capacity()
            );
        }
    }

    /// Polls a future once: `Some(output)` if it was ready.
    async fn poll_once<F: Future>(fut: F) -> Option<F::Output> {
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| match fut.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending => Poll::Ready(None),
        })
        .await
    }

    #[tokio::test]
    async fn connects_over_tcp() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = BytesMut::new();
            let mut decoder = RequestDecoder::default();
            let mut args = Vec::new();
            while socket.read_buf(&mut buf).await.unwrap() > 0 {
                while decoder.decode(&mut buf, &mut args).unwrap() {
                    socket.write_all(b"+PONG\r\n").await.unwrap();
                }
            }
        });
        let mut client = Client::connect(addr).await.unwrap();
        assert_eq!(client.cmd(&["PING"]).await.unwrap(), Frame::simple("PONG"));
    }
}
