//! Spare connection buffers, kept per thread between batches.
//!
//! A connection gives its buffers back when a batch leaves them empty, so an idle
//! connection holds none ([`crate::conn`]). Freed to the allocator, that cost an
//! unpipelined client a `malloc` and a `free` for each of its read buffer and its
//! reply buffer (and, then, its argument vector) on every request: about a seventh of the
//! instructions of a `-P 1` GET (callgrind). Given back here instead, they go to
//! the next connection of the same loop that has input, warm in its cache. Only
//! small buffers are kept, and only a few: what is kept is bounded per thread,
//! whatever the number of connections.

use std::cell::RefCell;

use bytes::BytesMut;

/// The size of every spare buffer: Redis's reply chunk (`PROTO_REPLY_CHUNK_BYTES`),
/// and what a connection reads at a time.
const KEEP_BYTES: usize = 16 * 1024;
/// How many a thread keeps (1 MB). A loop reads one connection's batch at a
/// time, but holds each connection's reply buffer until the round's replies are
/// written: one buffer for every connection served in a round, 25 to 50 in a
/// bench of 50 pipelining connections, and the rest for those that hold a
/// buffer across rounds (a request still arriving, output the client has not
/// read), whose buffers come back later.
const KEPT: usize = 64;

#[derive(Default)]
struct Spare {
    bytes: Vec<BytesMut>,
}

thread_local! {
    // Initialised in place (`const`): no lazy-initialisation check on each of
    // the several takes and gives of a round trip.
    static SPARE: RefCell<Spare> = const {
        RefCell::new(Spare {
            bytes: Vec::new(),
        })
    };
}

/// An empty buffer of [`KEEP_BYTES`]: a spare one when this thread has it.
pub fn take_bytes() -> BytesMut {
    SPARE
        .with_borrow_mut(|s| s.bytes.pop())
        .unwrap_or_else(|| BytesMut::with_capacity(KEEP_BYTES))
}

/// Gives back a buffer its connection no longer needs. Kept only if it is a used
/// spare that nothing else shares: `try_reclaim` takes the space before the
/// buffer's start back only for a buffer it owns alone, so one that comes back to
/// exactly [`KEEP_BYTES`] that way is a whole spare allocation. (A buffer that
/// already has that much room ahead of it would pass `try_reclaim` without the
/// check, and may be the tail of a bigger or shared allocation, which a spare must
/// not keep alive: it is freed, as is the rare spare taken and not used.) Others
/// are freed, or left to whoever shares them.
pub fn give_bytes(mut buf: BytesMut) {
    buf.clear();
    if buf.capacity() < KEEP_BYTES && buf.try_reclaim(KEEP_BYTES) && buf.capacity() == KEEP_BYTES {
        SPARE.with_borrow_mut(|s| {
            if s.bytes.len() < KEPT {
                s.bytes.push(buf);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use bytes::Buf;

    use super::*;

    /// Empties this thread's spares.
    fn drain() {
        SPARE.with_borrow_mut(|s| *s = Spare::default());
    }

    #[test]
    fn a_used_buffer_comes_back_whole() {
        drain();
        let mut b = take_bytes();
        b.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        let request = b.split_to(b.len()).freeze();
        drop(request);
        give_bytes(b);
        let again = take_bytes();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), KEEP_BYTES);
        assert!(
            SPARE.with_borrow(|s| s.bytes.is_empty()),
            "one given, one taken"
        );
    }

    #[test]
    fn shared_grown_and_foreign_buffers_are_not_kept() {
        drain();
        let mut b = take_bytes();
        b.extend_from_slice(b"message");
        let queued = b.split_to(7).freeze();
        give_bytes(b);
        drop(queued);
        let mut grown = take_bytes();
        grown.reserve(KEEP_BYTES + 1);
        give_bytes(grown);
        give_bytes(BytesMut::with_capacity(100));
        give_bytes(BytesMut::new());
        // Untouched: kept only by way of the check a used one goes through.
        give_bytes(BytesMut::with_capacity(KEEP_BYTES));
        // The tail of a bigger allocation, with exactly a spare's room left.
        let mut big = BytesMut::with_capacity(2 * KEEP_BYTES);
        big.extend_from_slice(&[b'x'; KEEP_BYTES]);
        let reply = big.split_to(KEEP_BYTES).freeze();
        give_bytes(big);
        drop(reply);
        assert!(SPARE.with_borrow(|s| s.bytes.is_empty()));
    }

    #[test]
    fn at_most_kept_per_thread() {
        drain();
        for _ in 0..KEPT + 5 {
            let mut used = BytesMut::with_capacity(KEEP_BYTES);
            used.extend_from_slice(b"+OK\r\n");
            used.advance(5);
            give_bytes(used);
        }
        SPARE.with_borrow(|s| assert_eq!(s.bytes.len(), KEPT));
    }
}
