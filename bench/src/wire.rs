//! The client side of the wire: command encoding, an allocation-free reply scanner
//! for the hot loop, and a small connection for one-off commands (INFO, loading).
//!
//! The hot loop never builds [`Frame`]s: it only needs to know where each reply
//! ends, whether it is an error (whose text is kept for the report) and whether it
//! is nil / zero (a cache miss). Frames are only built for one-off commands.

use bytes::{Buf, BytesMut};
use relcache_protocol::resp::{write_array_header, write_bulk, Frame, Limits, ReplyDecoder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Appends one command (an array of bulk strings) to `out`.
pub fn encode(out: &mut BytesMut, args: &[&[u8]]) {
    write_array_header(out, args.len());
    for a in args {
        write_bulk(out, a);
    }
}

/// Appends the decimal form of `n` to `out` as one bulk string.
pub fn write_bulk_u64(out: &mut BytesMut, n: u64) {
    let mut b = itoa::Buffer::new();
    write_bulk(out, b.format(n).as_bytes());
}

/// What the hot loop learns from one reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// An error reply (`-…` or `!…`).
    Error,
    /// A nil (`$-1`, `*-1`, `_`) or the integer 0.
    NilOrZero,
    /// Anything else.
    Value,
}

/// Scans one complete reply at the front of `buf`.
///
/// Returns `Ok(None)` if the reply is incomplete, `Ok(Some((reply, len)))` when it
/// spans `len` bytes.
///
/// # Errors
///
/// A message if the bytes are not RESP.
pub fn scan_reply(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(line_end) = memchr_nl(buf) else {
        return Ok(None);
    };
    if line_end < 2 || buf[line_end - 1] != b'\r' {
        return Err("reply line without CRLF".into());
    }
    let header = &buf[1..line_end - 1];
    let after = line_end + 1;
    let num = || -> Result<i64, String> {
        std::str::from_utf8(header)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .ok_or_else(|| format!("bad length {:?}", String::from_utf8_lossy(header)))
    };
    match buf[0] {
        b'-' => Ok(Some((Reply::Error, after))),
        b':' => Ok(Some((
            if num()? == 0 {
                Reply::NilOrZero
            } else {
                Reply::Value
            },
            after,
        ))),
        b'_' => Ok(Some((Reply::NilOrZero, after))),
        b'+' | b',' | b'#' | b'(' => Ok(Some((Reply::Value, after))),
        b'$' | b'=' | b'!' => {
            let len = num()?;
            if len < 0 {
                return Ok(Some((Reply::NilOrZero, after)));
            }
            let end = after + len as usize + 2;
            if buf.len() < end {
                return Ok(None);
            }
            let kind = if buf[0] == b'!' {
                Reply::Error
            } else {
                Reply::Value
            };
            Ok(Some((kind, end)))
        }
        b'*' | b'~' | b'>' | b'%' => {
            let mut count = num()?;
            if count < 0 {
                return Ok(Some((Reply::NilOrZero, after)));
            }
            if buf[0] == b'%' {
                count *= 2;
            }
            let mut at = after;
            for _ in 0..count {
                match scan_reply(&buf[at..])? {
                    Some((_, n)) => at += n,
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Value, at)))
        }
        other => Err(format!("unexpected reply type byte {:?}", other as char)),
    }
}

fn memchr_nl(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

/// The text of the error reply at the front of `buf` (which [`scan_reply`] said is
/// an error spanning `len` bytes).
#[must_use]
pub fn error_text(buf: &[u8], len: usize) -> String {
    let body = &buf[1..len.saturating_sub(2)];
    let body = if buf[0] == b'!' {
        // Blob error: skip the length line.
        body.iter()
            .position(|&b| b == b'\n')
            .map_or(body, |p| &body[p + 1..])
    } else {
        body
    };
    String::from_utf8_lossy(body).into_owned()
}

/// A plain connection for one-off commands: send, then read whole frames.
pub struct Conn {
    stream: TcpStream,
    buf: BytesMut,
    decoder: ReplyDecoder,
}

impl Conn {
    /// Connects to `host:port` with Nagle off.
    ///
    /// # Errors
    ///
    /// If the connection fails.
    pub async fn connect(host: &str, port: u16) -> anyhow::Result<Conn> {
        let stream = TcpStream::connect((host, port))
            .await
            .map_err(|e| anyhow::anyhow!("cannot connect to {host}:{port}: {e}"))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            decoder: ReplyDecoder::new(Limits::default()),
        })
    }

    /// Writes the encoded commands in `out` (emptying it).
    ///
    /// # Errors
    ///
    /// On an I/O error.
    pub async fn send(&mut self, out: &mut BytesMut) -> anyhow::Result<()> {
        self.stream.write_all(out).await?;
        out.clear();
        Ok(())
    }

    /// Reads one reply frame.
    ///
    /// # Errors
    ///
    /// On an I/O or protocol error, or if the server closes the connection.
    pub async fn read_frame(&mut self) -> anyhow::Result<Frame> {
        loop {
            if let Some(f) = self
                .decoder
                .decode(&mut self.buf)
                .map_err(|e| anyhow::anyhow!("protocol error in reply: {e:?}"))?
            {
                return Ok(f);
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                anyhow::bail!("server closed the connection");
            }
        }
    }

    /// Sends one command and returns its reply (errors are returned as frames).
    ///
    /// # Errors
    ///
    /// On an I/O or protocol error.
    pub async fn command(&mut self, args: &[&[u8]]) -> anyhow::Result<Frame> {
        let mut out = BytesMut::new();
        encode(&mut out, args);
        self.send(&mut out).await?;
        self.read_frame().await
    }

    /// `INFO memory`'s `used_memory`, if the server reports it.
    ///
    /// # Errors
    ///
    /// On an I/O or protocol error.
    pub async fn used_memory(&mut self) -> anyhow::Result<Option<u64>> {
        let f = self.command(&[b"INFO", b"memory"]).await?;
        let text = match f {
            Frame::Bulk(b) => b,
            Frame::Verbatim { text, .. } => text,
            _ => return Ok(None),
        };
        Ok(String::from_utf8_lossy(text.chunk())
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_every_shape_and_waits_for_more() {
        let cases: &[(&[u8], Reply)] = &[
            (b"+OK\r\n", Reply::Value),
            (b"-ERR x\r\n", Reply::Error),
            (b":0\r\n", Reply::NilOrZero),
            (b":7\r\n", Reply::Value),
            (b"$-1\r\n", Reply::NilOrZero),
            (b"_\r\n", Reply::NilOrZero),
            (b"$3\r\nabc\r\n", Reply::Value),
            (b"*2\r\n:1\r\n$-1\r\n", Reply::Value),
            (b"%1\r\n+a\r\n:1\r\n", Reply::Value),
            (b"!5\r\nERR x\r\n", Reply::Error),
        ];
        for (bytes, want) in cases {
            assert_eq!(
                scan_reply(bytes),
                Ok(Some((*want, bytes.len()))),
                "{bytes:?}"
            );
            for cut in 0..bytes.len() {
                assert_eq!(
                    scan_reply(&bytes[..cut]),
                    Ok(None),
                    "{bytes:?} cut at {cut}"
                );
            }
        }
        assert_eq!(error_text(b"-WRONGTYPE no\r\n", 15), "WRONGTYPE no");
        assert_eq!(error_text(b"!5\r\nERR x\r\n", 11), "ERR x");
        assert!(scan_reply(b"?\r\n").is_err());
    }
}
