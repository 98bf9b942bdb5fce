//! Writing a snapshot: a header, chunks as the caller hands them over, a trailer.
//!
//! The caller (the server's saver) gathers one batch of keys at a time into a
//! [`ChunkBuilder`] that borrows their bytes, and the [`Encoder`] lays it out at
//! the current file position: only then are the paged tables' offsets known.

use std::io::{self, Write};

use super::{
    crc32, page_align, CHUNK_TAG, HEADER_LEN, KIND_SET_INLINE, KIND_SET_PAGED, KIND_STRING, MAGIC,
    PAGED_MIN, TRAILER_TAG, VERSION,
};

/// One record to write, borrowing its bytes.
#[derive(Debug)]
enum Item<'t> {
    Str {
        key: &'t [u8],
        value: &'t [u8],
        expire_at: u64,
    },
    Set {
        key: &'t [u8],
        table: &'t [u8],
        seq: u64,
        expire_at: u64,
    },
}

impl Item<'_> {
    /// Bytes this record takes in the record area.
    fn record_len(&self) -> u64 {
        // kind, key length, key, expiry
        let common = |key: &[u8]| 1 + 4 + key.len() as u64 + 8;
        match self {
            Item::Str { key, value, .. } => common(key) + 8 + value.len() as u64,
            Item::Set { key, table, .. } if table.len() >= PAGED_MIN => common(key) + 8 + 8 + 8 + 4,
            Item::Set { key, table, .. } => common(key) + 8 + 8 + table.len() as u64,
        }
    }

    fn paged_table(&self) -> Option<&[u8]> {
        match self {
            Item::Set { table, .. } if table.len() >= PAGED_MIN => Some(table),
            _ => None,
        }
    }
}

/// The records of one chunk, in the order they will be written.
#[derive(Debug, Default)]
pub struct ChunkBuilder<'t> {
    items: Vec<Item<'t>>,
}

impl<'t> ChunkBuilder<'t> {
    pub fn new() -> ChunkBuilder<'t> {
        ChunkBuilder::default()
    }

    /// A string key. `expire_at` is Unix ms, 0 for none.
    pub fn string(&mut self, key: &'t [u8], value: &'t [u8], expire_at: u64) {
        self.items.push(Item::Str {
            key,
            value,
            expire_at,
        });
    }

    /// A set key: its idset `table` (stored verbatim), as of change `seq`.
    pub fn set(&mut self, key: &'t [u8], table: &'t [u8], seq: u64, expire_at: u64) {
        self.items.push(Item::Set {
            key,
            table,
            seq,
            expire_at,
        });
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Zeros for padding.
static ZEROS: [u8; 4096] = [0; 4096];

/// Writes a snapshot to `out`, keeping track of the file position.
#[derive(Debug)]
pub struct Encoder<W: Write> {
    out: W,
    pos: u64,
    chunks: u32,
    records: u64,
    /// The record area being built, reused from chunk to chunk.
    buf: Vec<u8>,
}

impl<W: Write> Encoder<W> {
    /// Writes the header. `created_ms` is the recorded time (Unix ms): every change
    /// made before it must be in the snapshot (see SNAPSHOT.md §2).
    ///
    /// # Errors
    ///
    /// Whatever `out` returns.
    pub fn new(mut out: W, created_ms: u64) -> io::Result<Encoder<W>> {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        // 12..16 flags and 24..28 reserved stay zero.
        h[16..24].copy_from_slice(&created_ms.to_le_bytes());
        let crc = crc32(&h[..28]);
        h[28..32].copy_from_slice(&crc.to_le_bytes());
        out.write_all(&h)?;
        Ok(Encoder {
            out,
            pos: HEADER_LEN as u64,
            chunks: 0,
            records: 0,
            buf: Vec::new(),
        })
    }

    /// Bytes written so far.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Writes `chunk` at the current position: its header, its records, and its
    /// paged tables each on a page boundary.
    ///
    /// # Errors
    ///
    /// Whatever `out` returns; a chunk of more than `u32::MAX` records is refused.
    pub fn write_chunk(&mut self, chunk: &ChunkBuilder<'_>) -> io::Result<()> {
        let count = u32::try_from(chunk.items.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "chunk too large"))?;
        let records_start = self.pos + HEADER_LEN as u64;
        let records_len: u64 = chunk.items.iter().map(Item::record_len).sum();
        let records_end = records_start + records_len;

        // Where each paged table goes: the first on the page after the records, each
        // next one on the page after the previous one's end.
        let mut next = page_align(records_end);
        let tables_start = next;
        let mut tables_end = tables_start;
        let mut offsets = Vec::new();
        for table in chunk.items.iter().filter_map(Item::paged_table) {
            offsets.push(next);
            tables_end = next + table.len() as u64;
            next = page_align(tables_end);
        }
        let tables_len = tables_end - tables_start;

        self.buf.clear();
        self.buf.reserve(records_len as usize);
        let mut offsets_iter = offsets.iter();
        for item in &chunk.items {
            encode_record(&mut self.buf, item, &mut offsets_iter);
        }
        debug_assert_eq!(self.buf.len() as u64, records_len);

        let mut h = [0u8; HEADER_LEN];
        h[0..4].copy_from_slice(&CHUNK_TAG);
        h[4..8].copy_from_slice(&count.to_le_bytes());
        h[8..16].copy_from_slice(&records_len.to_le_bytes());
        h[16..24].copy_from_slice(&tables_len.to_le_bytes());
        h[24..28].copy_from_slice(&crc32(&self.buf).to_le_bytes());
        let crc = crc32(&h[..28]);
        h[28..32].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&self.buf)?;

        let mut pos = records_end;
        for (table, &at) in chunk
            .items
            .iter()
            .filter_map(Item::paged_table)
            .zip(&offsets)
        {
            pad(&mut self.out, at - pos)?;
            self.out.write_all(table)?;
            pos = at + table.len() as u64;
        }
        self.pos = pos;
        self.chunks += 1;
        self.records += u64::from(count);
        Ok(())
    }

    /// Writes the trailer and hands back the writer (to flush and sync).
    ///
    /// # Errors
    ///
    /// Whatever `out` returns.
    pub fn finish(mut self) -> io::Result<W> {
        let mut t = [0u8; HEADER_LEN];
        t[0..4].copy_from_slice(&TRAILER_TAG);
        t[4..8].copy_from_slice(&self.chunks.to_le_bytes());
        t[8..16].copy_from_slice(&self.records.to_le_bytes());
        let file_len = self.pos + HEADER_LEN as u64;
        t[16..24].copy_from_slice(&file_len.to_le_bytes());
        let crc = crc32(&t[..28]);
        t[28..32].copy_from_slice(&crc.to_le_bytes());
        self.out.write_all(&t)?;
        Ok(self.out)
    }
}

fn pad(out: &mut impl Write, mut n: u64) -> io::Result<()> {
    while n > 0 {
        let k = n.min(ZEROS.len() as u64);
        out.write_all(&ZEROS[..k as usize])?;
        n -= k;
    }
    Ok(())
}

fn encode_record<'o>(
    buf: &mut Vec<u8>,
    item: &Item<'_>,
    offsets: &mut impl Iterator<Item = &'o u64>,
) {
    let head = |buf: &mut Vec<u8>, kind: u8, key: &[u8], expire_at: u64| {
        buf.push(kind);
        buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
        buf.extend_from_slice(key);
        buf.extend_from_slice(&expire_at.to_le_bytes());
    };
    match *item {
        Item::Str {
            key,
            value,
            expire_at,
        } => {
            head(buf, KIND_STRING, key, expire_at);
            buf.extend_from_slice(&(value.len() as u64).to_le_bytes());
            buf.extend_from_slice(value);
        }
        Item::Set {
            key,
            table,
            seq,
            expire_at,
        } if table.len() >= PAGED_MIN => {
            head(buf, KIND_SET_PAGED, key, expire_at);
            buf.extend_from_slice(&seq.to_le_bytes());
            buf.extend_from_slice(&(table.len() as u64).to_le_bytes());
            let at = offsets.next().copied().unwrap_or_default();
            buf.extend_from_slice(&at.to_le_bytes());
            buf.extend_from_slice(&crc32(table).to_le_bytes());
        }
        Item::Set {
            key,
            table,
            seq,
            expire_at,
        } => {
            head(buf, KIND_SET_INLINE, key, expire_at);
            buf.extend_from_slice(&seq.to_le_bytes());
            buf.extend_from_slice(&(table.len() as u64).to_le_bytes());
            buf.extend_from_slice(table);
        }
    }
}
