//! A connection's pending output: replies encoded into one buffer, and big
//! string values queued by reference rather than copied.
//!
//! A GET of a 400 MB value used to copy it into the reply buffer: 400 MB more
//! memory for as long as the client took to read it (Redis does the same), and
//! ~100k page faults to make it. A bulk reply of at least [`SHARED_MIN`] bytes is
//! now queued as the value itself — `Bytes` is reference-counted, so the keyspace
//! and the reply share it — between the encoded bytes before and after it, and
//! the socket is written with `writev` over the queue.

use std::collections::VecDeque;
use std::io::{self, IoSlice};

use bytes::{Buf, Bytes, BytesMut};

use crate::conn::Socket;
use crate::spare;

/// Bulk replies this long and longer are queued by reference: below it a copy
/// into the reply buffer costs less than another `iovec` and a reference.
pub const SHARED_MIN: usize = 64 * 1024;

/// Most parts handed to one `writev` (Linux takes up to 1024).
const MAX_IOV: usize = 64;

/// Most bytes one [`Output::write_to`] writes, as long as the socket takes
/// them: a client reading a 400 MB value as fast as loopback gives it kept
/// its loop writing for 77–152 ms (the stalls bench), and the loop's other
/// clients waiting. Redis stops a write event once it has written more than
/// 64 KB (`NET_MAX_WRITES_PER_EVENT`, unless over `maxmemory`), though one
/// `write` of a big reply may send more. The connection is served again after
/// the loop's other ready ones; a write of this size takes a few hundred
/// microseconds.
const MAX_WRITE: usize = 1024 * 1024;

#[derive(Default)]
pub struct Output {
    /// What goes out before `tail`, in order: encoded replies frozen when a
    /// shared value was queued after them, and the shared values.
    queued: VecDeque<Part>,
    /// Bytes in `queued`.
    queued_len: usize,
    /// Where replies are encoded; its bytes go after `queued`.
    tail: BytesMut,
}

/// A queued part: its unwritten bytes, and for a shared value its length when
/// queued (`bytes` shrinks as it is written).
struct Part {
    bytes: Bytes,
    shared: Option<usize>,
}

impl Output {
    /// Bytes waiting to be written.
    #[inline]
    pub fn len(&self) -> usize {
        self.queued_len + self.tail.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Memory the pending output holds: the reply buffer's allocation and the
    /// encoded parts queued. A shared value counts only once the reply is all
    /// that holds it (its key deleted or overwritten meanwhile): until then it
    /// is the keyspace's memory, and counting it here too would take it out of
    /// what `maxmemory` sees as data. `len` counts it either way, as Redis's
    /// output limits count its copy.
    #[inline]
    pub fn allocated(&self) -> usize {
        if self.queued.is_empty() {
            return self.tail.capacity();
        }
        let queued: usize = self
            .queued
            .iter()
            .filter(|p| p.shared.is_none() || p.bytes.is_unique())
            .map(|p| p.shared.unwrap_or(p.bytes.len()))
            .sum();
        queued + self.tail.capacity()
    }

    /// The buffer replies are encoded into; one of the thread's spares if it has
    /// none (an idle connection holds none).
    #[inline]
    pub fn buf(&mut self) -> &mut BytesMut {
        if self.tail.capacity() == 0 {
            self.tail = spare::take_bytes();
        }
        &mut self.tail
    }

    /// Queues `value` to be written next, by reference.
    pub fn push_shared(&mut self, value: Bytes) {
        if !self.tail.is_empty() {
            let before = self.tail.split().freeze();
            self.queued_len += before.len();
            self.queued.push_back(Part {
                bytes: before,
                shared: None,
            });
        }
        self.queued_len += value.len();
        self.queued.push_back(Part {
            shared: Some(value.len()),
            bytes: value,
        });
    }

    /// Writes as much as the socket takes now, up to [`MAX_WRITE`]; returns how
    /// much that was. Once all is written, the reply buffer goes back to the
    /// thread's spares, so a connection never keeps the size of its largest
    /// reply.
    pub fn write_to(&mut self, stream: &impl Socket) -> io::Result<usize> {
        let mut written = 0;
        while !self.is_empty() && written < MAX_WRITE {
            // Bounded in each call too: a socket whose reader keeps draining it
            // takes a 400 MB `writev` 15–24 MB at a time, 5–8 ms a call.
            let mut room = MAX_WRITE - written;
            let n = if self.queued.is_empty() {
                stream.send(&self.tail[..self.tail.len().min(room)])
            } else {
                let mut parts = [IoSlice::new(&[]); MAX_IOV];
                let mut k = 0;
                let all = self.queued.iter().map(|p| &p.bytes[..]);
                for part in all.chain([&self.tail[..]]).take(MAX_IOV) {
                    let part = &part[..part.len().min(room)];
                    parts[k] = IoSlice::new(part);
                    k += 1;
                    room -= part.len();
                    if room == 0 {
                        break;
                    }
                }
                stream.send_vectored(&parts[..k])
            };
            match n {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    written += n;
                    self.consume(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        if self.is_empty() {
            spare::give_bytes(std::mem::take(&mut self.tail));
        }
        Ok(written)
    }

    /// Drops the first `n` bytes, which have been written.
    fn consume(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.queued.front_mut() else {
                self.tail.advance(n);
                return;
            };
            if n < front.bytes.len() {
                front.bytes.advance(n);
                self.queued_len -= n;
                return;
            }
            n -= front.bytes.len();
            self.queued_len -= front.bytes.len();
            let done = self.queued.pop_front().expect("front exists");
            // The last reference to a big value (its key deleted while it was
            // being sent): freeing it could keep this loop for milliseconds.
            if done
                .shared
                .is_some_and(|len| len >= crate::db::LAZY_FREE_MIN)
                && done.bytes.is_unique()
            {
                crate::offload::free_later(done.bytes);
            }
        }
    }

    /// Gives up whatever is pending (a client cut off for not reading, or gone):
    /// a big unwritten buffer, or queued values that may be the last references
    /// to big ones, are left to the lazy-free thread.
    pub fn discard(&mut self) {
        let queued: Vec<Bytes> = self.queued.drain(..).map(|p| p.bytes).collect();
        self.queued_len = 0;
        let tail = std::mem::take(&mut self.tail);
        if tail.capacity() > crate::offload::LARGE_REQUEST || !queued.is_empty() {
            crate::offload::free_later((tail, queued));
        }
    }

    /// Gives the reply buffer back if nothing is in it (taken for a reply that
    /// did not come: the command was parked).
    pub fn release_if_empty(&mut self) {
        if self.is_empty() {
            spare::give_bytes(std::mem::take(&mut self.tail));
        }
    }

    /// The pending bytes, copied out (the fuzz harness compares them).
    #[cfg(feature = "fuzzing")]
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        for p in &self.queued {
            v.extend_from_slice(&p.bytes);
        }
        v.extend_from_slice(&self.tail);
        v
    }
}

impl Drop for Output {
    /// However the connection ends (an I/O error, a kill, a timeout), what was
    /// pending is let go of off the loop when big.
    fn drop(&mut self) {
        self.discard();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply buffer, a shared value and more replies after it: `$5\r\n`,
    /// `hello`, `\r\n+OK\r\n`.
    fn sample(value: Bytes) -> Output {
        let mut o = Output::default();
        o.buf().extend_from_slice(b"$5\r\n");
        o.push_shared(value);
        o.buf().extend_from_slice(b"\r\n+OK\r\n");
        o
    }

    fn pending(o: &Output) -> Vec<u8> {
        let mut v: Vec<u8> = o.queued.iter().flat_map(|p| p.bytes.to_vec()).collect();
        v.extend_from_slice(&o.tail);
        v
    }

    #[test]
    fn writes_that_end_anywhere_keep_the_rest_in_order() {
        let all = pending(&sample(Bytes::from_static(b"hello")));
        assert_eq!(all, b"$5\r\nhello\r\n+OK\r\n");
        for cut in 0..=all.len() {
            let mut o = sample(Bytes::from_static(b"hello"));
            o.consume(cut);
            assert_eq!(pending(&o), &all[cut..], "after {cut} bytes");
            assert_eq!(o.len(), all.len() - cut);
        }
        // In two steps, across the boundaries.
        for first in 0..=all.len() {
            for second in 0..=all.len() - first {
                let mut o = sample(Bytes::from_static(b"hello"));
                o.consume(first);
                o.consume(second);
                assert_eq!(pending(&o), &all[first + second..]);
            }
        }
    }

    /// A socket that takes at most `take` bytes a call, and keeps them.
    struct Sink {
        take: usize,
        got: std::cell::RefCell<Vec<u8>>,
        largest: std::cell::Cell<usize>,
    }

    impl Socket for Sink {
        fn recv_spare(&self, _: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
            unreachable!("only written to")
        }

        fn send(&self, buf: &[u8]) -> io::Result<usize> {
            self.send_vectored(&[IoSlice::new(buf)])
        }

        fn send_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
            let offered: usize = bufs.iter().map(|b| b.len()).sum();
            self.largest.set(self.largest.get().max(offered));
            let mut left = self.take;
            for b in bufs {
                let n = b.len().min(left);
                self.got.borrow_mut().extend_from_slice(&b[..n]);
                left -= n;
            }
            Ok(self.take - left)
        }
    }

    /// However much the socket would take, one call writes at most
    /// `MAX_WRITE`, offers the socket no more than that, and the calls
    /// together write everything in order.
    #[test]
    fn a_write_is_bounded_and_the_rest_follows_in_order() {
        let value = Bytes::from((0..3 * MAX_WRITE + 5).map(|i| i as u8).collect::<Vec<u8>>());
        for take in [usize::MAX, MAX_WRITE + 1, MAX_WRITE / 3, 7] {
            let mut o = Output::default();
            o.buf().extend_from_slice(b"$before\r\n");
            o.push_shared(value.clone());
            o.buf().extend_from_slice(b"\r\n+after\r\n");
            let all = pending(&o);
            let sink = Sink {
                take,
                got: Default::default(),
                largest: Default::default(),
            };
            let mut calls = 0;
            while !o.is_empty() {
                let n = o.write_to(&sink).unwrap();
                assert!(n > 0 && n <= MAX_WRITE, "{n} bytes in one call");
                calls += 1;
            }
            assert!(
                sink.largest.get() <= MAX_WRITE,
                "offered {}",
                sink.largest.get()
            );
            assert!(calls >= all.len().div_ceil(MAX_WRITE), "{calls} calls");
            assert_eq!(*sink.got.borrow(), all, "socket taking {take} a call");
        }
    }

    #[test]
    fn a_shared_value_is_the_clients_memory_only_once_the_key_lets_go() {
        let stored = Bytes::from(vec![7u8; 1000]);
        let o = sample(stored.clone());
        let own = o.allocated();
        assert!(own < 1000 + o.tail.capacity(), "{own}");
        drop(stored);
        assert_eq!(o.allocated(), own + 1000);
        assert_eq!(o.len(), 4 + 1000 + 7);
    }
}
