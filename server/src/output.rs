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
use tokio::net::TcpStream;

use crate::spare;

/// Bulk replies this long and longer are queued by reference: below it a copy
/// into the reply buffer costs less than another `iovec` and a reference.
pub const SHARED_MIN: usize = 64 * 1024;

/// Most parts handed to one `writev` (Linux takes up to 1024).
const MAX_IOV: usize = 64;

#[derive(Default)]
pub struct Output {
    /// What goes out before `tail`, in order: encoded replies frozen when a
    /// shared value was queued after them, and the shared values.
    queued: VecDeque<Bytes>,
    /// Bytes in `queued`.
    queued_len: usize,
    /// Where replies are encoded; its bytes go after `queued`.
    tail: BytesMut,
}

impl Output {
    /// Bytes waiting to be written.
    pub fn len(&self) -> usize {
        self.queued_len + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Memory the pending output holds: the reply buffer's allocation, and what
    /// is queued (a shared value counts as the client's while it is being
    /// sent: the key may go meanwhile, and the reply then keeps it alive).
    pub fn allocated(&self) -> usize {
        self.queued_len + self.tail.capacity()
    }

    /// The buffer replies are encoded into; one of the thread's spares if it has
    /// none (an idle connection holds none).
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
            self.queued.push_back(before);
        }
        self.queued_len += value.len();
        self.queued.push_back(value);
    }

    /// Writes as much as the socket takes now; returns how much that was. Once
    /// all is written, the reply buffer goes back to the thread's spares, so a
    /// connection never keeps the size of its largest reply.
    pub fn write_to(&mut self, stream: &TcpStream) -> io::Result<usize> {
        let mut written = 0;
        while !self.is_empty() {
            let n = if self.queued.is_empty() {
                stream.try_write(&self.tail)
            } else {
                let mut parts = [IoSlice::new(&[]); MAX_IOV];
                let mut k = 0;
                for b in self.queued.iter().take(MAX_IOV - 1) {
                    parts[k] = IoSlice::new(b);
                    k += 1;
                }
                // The tail goes too once every queued part is in.
                if k == self.queued.len() {
                    parts[k] = IoSlice::new(&self.tail);
                    k += 1;
                }
                stream.try_write_vectored(&parts[..k])
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
            if n < front.len() {
                front.advance(n);
                self.queued_len -= n;
                return;
            }
            n -= front.len();
            self.queued_len -= front.len();
            let done = self.queued.pop_front().expect("front exists");
            // The last reference to a big value (its key deleted while it was
            // being sent): freeing it could keep this loop for milliseconds.
            if done.len() >= crate::db::LAZY_FREE_MIN {
                crate::offload::free_later(done);
            }
        }
    }

    /// Gives up whatever is pending (a client cut off for not reading): the
    /// unwritten buffer, big after a cut-off, is left to the lazy-free thread.
    pub fn discard(&mut self) {
        let queued = std::mem::take(&mut self.queued);
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
        for b in &self.queued {
            v.extend_from_slice(b);
        }
        v.extend_from_slice(&self.tail);
        v
    }
}
