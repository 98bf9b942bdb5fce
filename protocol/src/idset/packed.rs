//! Packed ids: a list of `u64` ids as little-endian 8-byte words back to back, the
//! binary form of an id list that needs no decimal parsing on either side
//! (`IDSET.LOAD … PACKED`, `IDSET.MEXISTSBIN`, `IDSET.MEMBERS … PACKED`).
//!
//! Not a table: no header, no hashing, any order, repeats allowed. [`unpack`] is
//! the one reader of the form; a writer appends `id.to_le_bytes()` per id.

use super::table::Words;

/// Length in bytes of one packed id.
pub const PACKED_ID_LEN: usize = 8;

/// Packed ids whose length is not a whole number of ids. The `Display` text is
/// meant for clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("packed ids must be a multiple of 8 bytes (little-endian u64s), got {len} bytes")]
pub struct RaggedPacked {
    /// The length given.
    pub len: usize,
}

/// The ids packed in `bytes`, in order.
///
/// # Errors
///
/// [`RaggedPacked`] unless the length is a multiple of 8.
///
/// ```
/// use relcache_protocol::idset::unpack;
///
/// let bytes: Vec<u8> = [7u64, u64::MAX].iter().flat_map(|id| id.to_le_bytes()).collect();
/// assert_eq!(unpack(&bytes).unwrap().collect::<Vec<_>>(), [7, u64::MAX]);
/// assert!(unpack(&[1, 2, 3]).is_err());
/// ```
pub fn unpack(bytes: &[u8]) -> Result<Packed<'_>, RaggedPacked> {
    if !bytes.len().is_multiple_of(PACKED_ID_LEN) {
        return Err(RaggedPacked { len: bytes.len() });
    }
    Ok(Packed(Words::new(bytes)))
}

/// Iterator over packed ids; see [`unpack`].
#[derive(Clone, Debug)]
pub struct Packed<'a>(Words<'a>);

impl Iterator for Packed<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        self.0.next()
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Packed<'_> {}

impl std::iter::FusedIterator for Packed<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_words_and_refuses_ragged_input() {
        let mut bytes = Vec::new();
        for id in [0u64, 1, 0x0102_0304_0506_0708, u64::MAX] {
            bytes.extend_from_slice(&id.to_le_bytes());
        }
        assert_eq!(bytes[16], 0x08, "least significant byte first");
        let ids: Vec<u64> = unpack(&bytes).unwrap().collect();
        assert_eq!(ids, [0, 1, 0x0102_0304_0506_0708, u64::MAX]);
        assert_eq!(unpack(&[]).unwrap().len(), 0);
        for len in [1, 7, 9, 15] {
            let err = unpack(&bytes[..len]).unwrap_err();
            assert_eq!(err, RaggedPacked { len });
            assert!(err.to_string().contains("multiple of 8"), "{err}");
        }
    }
}
