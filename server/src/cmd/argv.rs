//! A request's arguments as commands see them: plain slices, `argv[0]` the name.
//!
//! Arguments are slices of the buffer that holds the request, not a `Bytes`
//! each: a reference-counted handle per argument cost two atomic operations
//! (taking it and dropping it) for every argument of every request, a fifth of
//! the server's time on a 100-id SMISMEMBER. A command takes ownership only of
//! what it keeps, through [`Argv::stored`]: a copy of a small argument (which must
//! not pin the request's buffer), or, for a big one that came in an allocation
//! of its own, that allocation.

use std::ops::Deref;

use bytes::Bytes;
use relcache_protocol::resp::BIG_ARG;
use smallvec::SmallVec;

/// The arguments of one request, and the allocations of their own some of them
/// came in.
#[derive(Clone, Copy)]
pub struct Argv<'a> {
    list: &'a [&'a [u8]],
    /// Arguments that own their allocation (the decoder's gathered big argument,
    /// or every argument of a queued or parked command), which a command may
    /// keep as they are. A script's call has none: its arguments are the
    /// script's Lua strings, borrowed for the call.
    owned: &'a [Bytes],
}

impl<'a> Argv<'a> {
    /// `list`, some of whose elements may be (the whole of) elements of `owned`.
    pub fn new(list: &'a [&'a [u8]], owned: &'a [Bytes]) -> Self {
        Argv { list, owned }
    }

    /// What a command stores of `arg`, one of these arguments: the allocation it
    /// came in when it is big and has one of its own, so a 213 KB table or a
    /// 400 MB string is not copied again; otherwise a copy, which for a slice of
    /// the read buffer is what lets that buffer go.
    pub fn stored(&self, arg: &[u8]) -> Bytes {
        if arg.len() >= BIG_ARG {
            let same = |b: &&Bytes| b.as_ptr() == arg.as_ptr() && b.len() == arg.len();
            if let Some(own) = self.owned.iter().find(same) {
                return own.clone();
            }
        }
        Bytes::copy_from_slice(arg)
    }

    /// Every argument as a `Bytes` of its own ([`stored`](Self::stored)), for a
    /// command kept to run later (queued in MULTI, parked).
    pub fn to_owned_vec(self) -> Vec<Bytes> {
        self.list.iter().map(|a| self.stored(a)).collect()
    }
}

impl<'a> Deref for Argv<'a> {
    type Target = [&'a [u8]];

    fn deref(&self) -> &[&'a [u8]] {
        self.list
    }
}

/// Runs `f` on the arguments `args` as an [`Argv`], every one of them owned.
pub fn with_owned<R>(args: &[Bytes], f: impl FnOnce(Argv<'_>) -> R) -> R {
    let list: SmallVec<[&[u8]; 16]> = args.iter().map(|a| &a[..]).collect();
    f(Argv::new(&list, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_big_argument_with_an_allocation_of_its_own_is_kept_as_it_is() {
        let big = Bytes::from(vec![b'x'; BIG_ARG]);
        let frame = Bytes::from(vec![b'y'; 2 * BIG_ARG]);
        let (small, whole) = (&frame[..3], &frame[BIG_ARG..]);
        let list = [&b"SET"[..], small, &big[..], whole];
        let owned = [big.clone()];
        let argv = Argv::new(&list, &owned);
        assert_eq!(argv.stored(&big).as_ptr(), big.as_ptr(), "no copy");
        // The rest are copies, which let the request's buffer go.
        for arg in [small, whole] {
            let kept = argv.stored(arg);
            assert_eq!(kept, arg);
            assert_ne!(kept.as_ptr(), arg.as_ptr());
        }
        // Equal bytes elsewhere are not the owned argument.
        let twin = vec![b'x'; BIG_ARG];
        assert_ne!(argv.stored(&twin).as_ptr(), big.as_ptr());
        let all = argv.to_owned_vec();
        assert_eq!(all, list);
        assert_eq!(all[2].as_ptr(), big.as_ptr());
    }

    #[test]
    fn owned_arguments_read_as_slices_of_themselves() {
        let args = [Bytes::from_static(b"GET"), Bytes::from(vec![b'k'; BIG_ARG])];
        with_owned(&args, |argv| {
            assert_eq!(argv.len(), 2);
            assert_eq!(argv[0], b"GET");
            assert_eq!(argv.stored(argv[1]).as_ptr(), args[1].as_ptr());
        });
    }
}
