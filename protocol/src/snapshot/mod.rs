//! The snapshot file: a whole keyspace on disk, written by SAVE / BGSAVE and read at
//! start (see `protocol/SNAPSHOT.md`, the contract, with test vectors).
//!
//! Like the idset table, it is a hand-specified little-endian layout, so a reader
//! in any language can be written from the document. This module is the reference
//! implementation and, like the rest of the crate, does no file I/O: [`Encoder`]
//! writes to any `std::io::Write`, [`Snapshot::open`] reads a byte slice (the server
//! hands it a memory map).
//!
//! # Layout
//!
//! ```text
//! file    = header, chunk*, trailer
//! header  = 32 bytes: magic "\x89RCSNAP\n", version, flags, created_ms, crc
//! chunk   = 32-byte chunk header, records, zero padding to a 4096 boundary,
//!           the chunk's paged tables (each starting on a 4096 boundary)
//! trailer = 32 bytes: "TAIL", chunk count, record count, file length, crc
//! ```
//!
//! Every section has its own CRC-32 (IEEE 802.3 polynomial, `crc32fast`): the
//! header and trailer over their own bytes, a chunk header over itself and, in it,
//! one over the chunk's records; each paged table has its CRC in its record. So a
//! torn or flipped byte is named by the section it is in, and a truncated file has
//! no trailer where one must be.
//!
//! Decoding trusts nothing: every length and offset is bounds-checked before use,
//! every table's structure is checked ([`crate::idset::check`] with
//! [`Check::Structure`](crate::idset::Check::Structure): what makes a table safe to
//! serve; the placement of its ids was checked when a client stored it), and each refusal is a
//! [`SnapshotError`] naming the byte offset and the section. Decoding is split
//! in two so a loader can use several cores: [`Snapshot::open`] checks the header,
//! walks the chunk headers and checks the trailer (O(chunks)); [`Snapshot::records`]
//! then checks and decodes one chunk, independently of the others.

mod decode;
mod encode;

pub use decode::{validate, ChunkSpan, Record, Records, Snapshot, Summary};
pub use encode::{ChunkBuilder, Encoder};

/// The first eight bytes of a snapshot: `\x89RCSNAP\n`. `0x89` is not text and the
/// newline catches a transfer that rewrote line ends, as PNG's signature does.
pub const MAGIC: [u8; 8] = [0x89, b'R', b'C', b'S', b'N', b'A', b'P', b'\n'];
/// The format version this crate writes and reads.
pub const VERSION: u32 = 1;
/// Length of the file header, of a chunk header and of the trailer.
pub const HEADER_LEN: usize = 32;
/// Tag of a chunk header: `CHNK`.
pub const CHUNK_TAG: [u8; 4] = *b"CHNK";
/// Tag of the trailer: `TAIL`.
pub const TRAILER_TAG: [u8; 4] = *b"TAIL";
/// Paged tables start on multiples of this many bytes of the file, so a reader can
/// map them in place.
pub const PAGE: u64 = 4096;
/// Tables at least this long are paged; shorter ones are inline in their record
/// (padding a 48-byte table to a page would multiply small sets' size by 85).
pub const PAGED_MIN: usize = 4096;

/// Record kinds (the first byte of a record).
pub const KIND_STRING: u8 = 1;
/// The smallest record: a string with an empty key and an empty value (kind, key
/// length, expiry, value length). A chunk claiming more records than its record
/// area can hold at this size is refused before anyone sizes anything by the claim.
pub const MIN_RECORD_LEN: u64 = 1 + 4 + 8 + 8;
/// A set whose table follows in the record.
pub const KIND_SET_INLINE: u8 = 2;
/// A set whose table is in the chunk's table area.
pub const KIND_SET_PAGED: u8 = 3;

/// The CRC of every section: CRC-32/ISO-HDLC (polynomial 0x04C11DB7, reflected,
/// initial value and final xor 0xFFFFFFFF), as zlib's `crc32`.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// `n` rounded up to a multiple of [`PAGE`].
pub const fn page_align(n: u64) -> u64 {
    n.div_ceil(PAGE) * PAGE
}

/// Where in the file a [`SnapshotError`] was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Section {
    Header,
    /// The header of chunk `n` (counting from 0).
    ChunkHeader(u32),
    /// The records of chunk `n`.
    Records(u32),
    /// The table area of chunk `n` (padding or a paged table).
    Tables(u32),
    Trailer,
}

impl std::fmt::Display for Section {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Section::Header => f.write_str("header"),
            Section::ChunkHeader(n) => write!(f, "chunk {n} header"),
            Section::Records(n) => write!(f, "chunk {n} records"),
            Section::Tables(n) => write!(f, "chunk {n} tables"),
            Section::Trailer => f.write_str("trailer"),
        }
    }
}

/// Why bytes are not a valid snapshot, and where: the message a server logs when
/// it refuses to start from the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("snapshot refused at byte {offset} ({section}): {what}")]
pub struct SnapshotError {
    /// Offset from the start of the file of the field (or section) that is wrong.
    pub offset: u64,
    pub section: Section,
    /// What is wrong, in a sentence.
    pub what: String,
}

impl SnapshotError {
    pub fn new(offset: u64, section: Section, what: impl Into<String>) -> SnapshotError {
        SnapshotError {
            offset,
            section,
            what: what.into(),
        }
    }
}
