//! Reading a snapshot from untrusted bytes: [`Snapshot::open`] checks the frame
//! (header, chunk headers, trailer), [`Snapshot::records`] one chunk's contents.
//! Nothing here indexes a slice with a length read from the input before checking
//! it against the input's size, so no file can make it panic or read out of bounds.

use super::{
    crc32, page_align, Section, SnapshotError, CHUNK_TAG, HEADER_LEN, KIND_SET_INLINE,
    KIND_SET_PAGED, KIND_STRING, MAGIC, MIN_RECORD_LEN, TRAILER_TAG, VERSION,
};
use crate::idset::{self, Check};

/// Where one chunk lies in the file (from its header, whose CRC was checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkSpan {
    /// Position among the chunks, from 0.
    pub index: u32,
    /// Offset of the chunk header.
    pub offset: u64,
    /// Number of records.
    pub records: u32,
    records_len: u64,
    records_crc: u32,
    tables_len: u64,
}

impl ChunkSpan {
    fn records_start(&self) -> u64 {
        self.offset + HEADER_LEN as u64
    }

    fn records_end(&self) -> u64 {
        self.records_start() + self.records_len
    }

    fn tables_start(&self) -> u64 {
        if self.tables_len == 0 {
            self.records_end()
        } else {
            page_align(self.records_end())
        }
    }

    /// Offset just past the chunk: where the next chunk or the trailer starts.
    fn end(&self) -> u64 {
        self.tables_start() + self.tables_len
    }
}

/// A snapshot whose frame is checked.
#[derive(Debug)]
pub struct Snapshot<'a> {
    bytes: &'a [u8],
    created_ms: u64,
    chunks: Vec<ChunkSpan>,
    records: u64,
}

/// One decoded record. The slices borrow the snapshot's bytes; a set's table has
/// passed [`idset::check`] of its structure ([`Check::Structure`]): the file is the
/// server's own, written from tables checked when they were stored, and its
/// checksums catch what changed since; the structure is what makes a table safe to
/// serve whatever its ids' placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    String {
        key: &'a [u8],
        value: &'a [u8],
        /// Unix ms; 0 for none.
        expire_at: u64,
        /// Offset of the record in the file.
        offset: u64,
    },
    Set {
        key: &'a [u8],
        table: &'a [u8],
        /// Offset of the table in the file (a multiple of the page size when the
        /// table is paged).
        table_offset: u64,
        seq: u64,
        expire_at: u64,
        offset: u64,
    },
}

impl<'a> Record<'a> {
    pub fn key(&self) -> &'a [u8] {
        match *self {
            Record::String { key, .. } | Record::Set { key, .. } => key,
        }
    }

    pub fn expire_at(&self) -> u64 {
        match *self {
            Record::String { expire_at, .. } | Record::Set { expire_at, .. } => expire_at,
        }
    }

    pub fn offset(&self) -> u64 {
        match *self {
            Record::String { offset, .. } | Record::Set { offset, .. } => offset,
        }
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The 32 bytes at `at`, if the file has them.
fn block(bytes: &[u8], at: u64) -> Option<&[u8]> {
    let at = usize::try_from(at).ok()?;
    bytes.get(at..at.checked_add(HEADER_LEN)?)
}

/// Checks a 32-byte block's own CRC (its last four bytes, over the first 28).
fn check_crc(b: &[u8], at: u64, section: Section) -> Result<(), SnapshotError> {
    let (stored, actual) = (le_u32(b, 28), crc32(&b[..28]));
    if stored != actual {
        return Err(SnapshotError::new(
            at + 28,
            section,
            format!("checksum mismatch (stored {stored:08x}, computed {actual:08x})"),
        ));
    }
    Ok(())
}

fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

impl<'a> Snapshot<'a> {
    /// Checks the header, every chunk header and the trailer.
    ///
    /// # Errors
    ///
    /// The first problem found, with its offset and section.
    pub fn open(bytes: &'a [u8]) -> Result<Snapshot<'a>, SnapshotError> {
        let len = bytes.len() as u64;
        let magic_len = bytes.len().min(MAGIC.len());
        if bytes[..magic_len] != MAGIC[..magic_len] {
            return Err(SnapshotError::new(
                0,
                Section::Header,
                "bad magic: a relcache snapshot starts with 89 52 43 53 4e 41 50 0a",
            ));
        }
        let h = block(bytes, 0).ok_or_else(|| {
            SnapshotError::new(
                len,
                Section::Header,
                format!("file is {len} bytes, shorter than the 32-byte header (truncated)"),
            )
        })?;
        check_crc(h, 0, Section::Header)?;
        let version = le_u32(h, 8);
        if version != VERSION {
            return Err(SnapshotError::new(
                8,
                Section::Header,
                format!(
                    "unsupported snapshot version {version} (this server reads version {VERSION})"
                ),
            ));
        }
        if le_u32(h, 12) != 0 || le_u32(h, 24) != 0 {
            let at = if le_u32(h, 12) != 0 { 12 } else { 24 };
            return Err(SnapshotError::new(
                at,
                Section::Header,
                "flags and reserved fields must be 0",
            ));
        }
        let created_ms = le_u64(h, 16);

        let mut chunks = Vec::new();
        let mut records = 0u64;
        let mut pos = HEADER_LEN as u64;
        loop {
            let index = u32::try_from(chunks.len()).map_err(|_| {
                SnapshotError::new(pos, Section::ChunkHeader(u32::MAX), "too many chunks")
            })?;
            let Some(b) = block(bytes, pos) else {
                return Err(SnapshotError::new(
                    len,
                    Section::Trailer,
                    format!("truncated: the file ends at byte {len} without a trailer"),
                ));
            };
            if b[0..4] == TRAILER_TAG {
                check_crc(b, pos, Section::Trailer)?;
                let (n_chunks, n_records, file_len) = (le_u32(b, 4), le_u64(b, 8), le_u64(b, 16));
                let bad = |at: u64, what: String| {
                    Err(SnapshotError::new(pos + at, Section::Trailer, what))
                };
                if n_chunks != index {
                    return bad(
                        4,
                        format!("trailer counts {n_chunks} chunks, the file has {index}"),
                    );
                }
                if n_records != records {
                    return bad(
                        8,
                        format!("trailer counts {n_records} records, the chunks hold {records}"),
                    );
                }
                if file_len != len || pos + HEADER_LEN as u64 != len {
                    return bad(16, format!("trailer says the file is {file_len} bytes; it is {len}, trailer at {pos}"));
                }
                if le_u32(b, 24) != 0 {
                    return bad(24, "reserved field must be 0".into());
                }
                return Ok(Snapshot {
                    bytes,
                    created_ms,
                    chunks,
                    records,
                });
            }
            let section = Section::ChunkHeader(index);
            if b[0..4] != CHUNK_TAG {
                return Err(SnapshotError::new(
                    pos,
                    section,
                    format!(
                        "expected a chunk (CHNK) or the trailer (TAIL), found bytes {:02x?}",
                        &b[0..4]
                    ),
                ));
            }
            check_crc(b, pos, section.clone())?;
            let span = ChunkSpan {
                index,
                offset: pos,
                records: le_u32(b, 4),
                records_len: le_u64(b, 8),
                tables_len: le_u64(b, 16),
                records_crc: le_u32(b, 24),
            };
            // Both lengths are bounded by the file before any sum is formed.
            if span.records_len > len || span.tables_len > len || span.end() > len {
                return Err(SnapshotError::new(
                    pos + 8,
                    section,
                    format!(
                        "chunk of {} record bytes and {} table bytes runs past the end of the file ({len} bytes; truncated?)",
                        span.records_len, span.tables_len
                    ),
                ));
            }
            if u64::from(span.records) > span.records_len / MIN_RECORD_LEN {
                return Err(SnapshotError::new(
                    pos + 4,
                    section,
                    format!(
                        "chunk claims {} records but its {} record bytes hold at most {}",
                        span.records,
                        span.records_len,
                        span.records_len / MIN_RECORD_LEN
                    ),
                ));
            }
            records += u64::from(span.records);
            pos = span.end();
            chunks.push(span);
        }
    }

    /// The recorded time: Unix ms at which the save started.
    pub fn created_ms(&self) -> u64 {
        self.created_ms
    }

    /// The chunks, in file order.
    pub fn chunks(&self) -> &[ChunkSpan] {
        &self.chunks
    }

    /// Records in the whole file (strings and sets).
    pub fn records_total(&self) -> u64 {
        self.records
    }

    /// Checks one chunk's record CRC and padding, and returns its records, each
    /// checked as it is read.
    ///
    /// # Errors
    ///
    /// A CRC mismatch or non-zero padding.
    pub fn records(&self, span: &ChunkSpan) -> Result<Records<'a>, SnapshotError> {
        // `open` checked that the whole chunk lies inside the file.
        let (rs, re) = (span.records_start() as usize, span.records_end() as usize);
        let area = &self.bytes[rs..re];
        let actual = crc32(area);
        if actual != span.records_crc {
            return Err(SnapshotError::new(
                span.offset + 24,
                Section::Records(span.index),
                format!(
                    "records checksum mismatch (stored {:08x}, computed {actual:08x})",
                    span.records_crc
                ),
            ));
        }
        let ts = span.tables_start() as usize;
        if !all_zero(&self.bytes[re..ts]) {
            return Err(SnapshotError::new(
                re as u64,
                Section::Tables(span.index),
                "padding before the tables is not zero",
            ));
        }
        Ok(Records {
            bytes: self.bytes,
            span: *span,
            pos: rs,
            left: span.records,
            next_table: span.tables_start(),
            done: false,
        })
    }
}

/// The records of one chunk, checked one by one. After an error it ends.
#[derive(Debug)]
pub struct Records<'a> {
    bytes: &'a [u8],
    span: ChunkSpan,
    pos: usize,
    left: u32,
    /// Where the next paged table must start; after the last, where it ended.
    next_table: u64,
    done: bool,
}

impl<'a> Records<'a> {
    fn err(&self, at: u64, what: impl Into<String>) -> SnapshotError {
        SnapshotError::new(at, Section::Records(self.span.index), what)
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8], SnapshotError> {
        let end = self.span.records_end() as usize;
        let room = (end - self.pos) as u64;
        if n > room {
            return Err(self.err(
                self.pos as u64,
                format!("{what} of {n} bytes runs past the end of the chunk's records"),
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32, SnapshotError> {
        Ok(le_u32(self.take(4, what)?, 0))
    }

    fn u64(&mut self, what: &str) -> Result<u64, SnapshotError> {
        Ok(le_u64(self.take(8, what)?, 0))
    }

    fn table_err(&self, at: u64, key: &[u8], e: idset::FormatError) -> SnapshotError {
        let shown = String::from_utf8_lossy(&key[..key.len().min(64)]).into_owned();
        SnapshotError::new(
            at,
            Section::Tables(self.span.index),
            format!("table of key '{shown}' is invalid: {e}"),
        )
    }

    fn next_record(&mut self) -> Result<Option<Record<'a>>, SnapshotError> {
        let end = self.span.records_end() as usize;
        if self.left == 0 {
            if self.pos != end {
                return Err(self.err(self.pos as u64, "bytes after the chunk's last record"));
            }
            let tables_end = self.span.end();
            if self.next_table != tables_end {
                return Err(SnapshotError::new(
                    self.next_table,
                    Section::Tables(self.span.index),
                    "the table area is longer than its tables",
                ));
            }
            return Ok(None);
        }
        let offset = self.pos as u64;
        let kind = self.take(1, "record kind")?[0];
        let key_len = self.u32("key length")?;
        let key = self.take(u64::from(key_len), "key")?;
        let expire_at = self.u64("expiry")?;
        let record = match kind {
            KIND_STRING => {
                let n = self.u64("value length")?;
                let value = self.take(n, "value")?;
                Record::String {
                    key,
                    value,
                    expire_at,
                    offset,
                }
            }
            KIND_SET_INLINE => {
                let seq = self.u64("sequence number")?;
                let n = self.u64("table length")?;
                let table_offset = self.pos as u64;
                let table = self.take(n, "table")?;
                idset::check(table, Check::Structure)
                    .map_err(|e| self.table_err(table_offset, key, e))?;
                Record::Set {
                    key,
                    table,
                    table_offset,
                    seq,
                    expire_at,
                    offset,
                }
            }
            KIND_SET_PAGED => {
                let seq = self.u64("sequence number")?;
                let n = self.u64("table length")?;
                let at_field = self.pos as u64;
                let at = self.u64("table offset")?;
                let crc = self.u32("table checksum")?;
                let table = self.paged(at_field, at, n, crc, key)?;
                Record::Set {
                    key,
                    table,
                    table_offset: at,
                    seq,
                    expire_at,
                    offset,
                }
            }
            other => {
                return Err(self.err(offset, format!("unknown record kind {other}")));
            }
        };
        self.left -= 1;
        Ok(Some(record))
    }

    /// A paged table: where the layout says the next one goes, inside the table
    /// area, after zero padding, with its CRC, and valid.
    fn paged(
        &mut self,
        field: u64,
        at: u64,
        n: u64,
        crc: u32,
        key: &[u8],
    ) -> Result<&'a [u8], SnapshotError> {
        let expected = page_align(self.next_table);
        if at != expected {
            return Err(self.err(field, format!("table offset {at}, expected {expected}")));
        }
        let tables_end = self.span.end();
        if tables_end.checked_sub(at).is_none_or(|room| n > room) {
            return Err(self.err(
                field - 8,
                format!("table of {n} bytes at {at} runs past the chunk's table area (ends at {tables_end})"),
            ));
        }
        let tables = Section::Tables(self.span.index);
        if !all_zero(&self.bytes[self.next_table as usize..at as usize]) {
            return Err(SnapshotError::new(
                self.next_table,
                tables,
                "padding between tables is not zero",
            ));
        }
        let table = &self.bytes[at as usize..(at + n) as usize];
        let actual = crc32(table);
        if actual != crc {
            return Err(SnapshotError::new(
                at,
                tables,
                format!("table checksum mismatch (stored {crc:08x}, computed {actual:08x})"),
            ));
        }
        idset::check(table, Check::Structure).map_err(|e| self.table_err(at, key, e))?;
        self.next_table = at + n;
        Ok(table)
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, SnapshotError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(r)) => Some(Ok(r)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// What a whole-file check found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub created_ms: u64,
    pub chunks: u32,
    pub strings: u64,
    pub sets: u64,
}

/// Checks a whole snapshot (every section, every record, every table).
///
/// # Errors
///
/// The first problem, with its offset and section.
pub fn validate(bytes: &[u8]) -> Result<Summary, SnapshotError> {
    let snap = Snapshot::open(bytes)?;
    let mut s = Summary {
        created_ms: snap.created_ms(),
        chunks: snap.chunks().len() as u32,
        ..Summary::default()
    };
    for span in snap.chunks() {
        for r in snap.records(span)? {
            match r? {
                Record::String { .. } => s.strings += 1,
                Record::Set { .. } => s.sets += 1,
            }
        }
    }
    Ok(s)
}
