//! Stored keys, short ones inline.
//!
//! A lookup compares the probed entry's key with the request's. With keys on the
//! heap, that comparison is a cache miss of its own on every lookup; relation-cache
//! keys are short (`user:123456789:following` is 24 bytes), so keys up to
//! [`INLINE`] bytes live inside the entry itself and the comparison reads memory the
//! probe already brought in. Longer keys are `Bytes` on the heap.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

use bytes::Bytes;

/// Longest key stored inline.
pub const INLINE: usize = 30;

#[derive(Clone)]
enum Repr {
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Bytes),
}

/// A key as stored in a shard.
#[derive(Clone)]
pub struct Key(Repr);

impl Key {
    /// An owned copy of `k` (never a reference into the caller's buffer).
    pub fn copy_from(k: &[u8]) -> Key {
        if k.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..k.len()].copy_from_slice(k);
            Key(Repr::Inline {
                len: k.len() as u8,
                buf,
            })
        } else {
            Key(Repr::Heap(Bytes::copy_from_slice(k)))
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline { len, buf } => &buf[..*len as usize],
            Repr::Heap(b) => b,
        }
    }

    /// The key as `Bytes` (a copy for inline keys), for replies.
    pub fn to_bytes(&self) -> Bytes {
        match &self.0 {
            Repr::Inline { .. } => Bytes::copy_from_slice(self.as_slice()),
            Repr::Heap(b) => b.clone(),
        }
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.as_slice()
    }
}

// Hash and Eq must agree with `[u8]`'s, since maps are probed with `&[u8]`.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Key {}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq<[u8]> for Key {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_slice()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn inline_and_heap_keys_look_up_by_slice() {
        assert!(
            std::mem::size_of::<Key>() <= 40,
            "size {}",
            std::mem::size_of::<Key>()
        );
        let short = Key::copy_from(b"user:1:following");
        let long = Key::copy_from(&[b'x'; 100]);
        assert!(
            matches!(short.0, Repr::Inline { .. }),
            "short keys live inline"
        );
        assert!(matches!(&long.0, Repr::Heap(b) if b.len() == 100));
        let mut m: HashMap<Key, u32> = HashMap::new();
        m.insert(short.clone(), 1);
        m.insert(long.clone(), 2);
        m.insert(Key::copy_from(b""), 3);
        assert_eq!(m.get(&b"user:1:following"[..]), Some(&1));
        assert_eq!(m.get(&[b'x'; 100][..]), Some(&2));
        assert_eq!(m.get(&b""[..]), Some(&3));
        assert_eq!(m.get(&b"user:1:followinG"[..]), None);
        assert_eq!(&*short.to_bytes(), b"user:1:following");
    }
}
