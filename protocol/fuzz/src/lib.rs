//! Helpers shared by the fuzz targets: how a fuzz input is turned into a stream
//! cut into reads, and which limits it is parsed under.

use relcache_protocol::resp::Limits;

/// A fuzz input read as `[flags][2 × cuts bytes of u16 LE cut points][stream]`:
/// bit 0 of `flags` picks small limits (so that limit errors are reached), bits 1–7
/// the number of cuts. Returns the limits, the whole stream, and the stream cut at
/// those points, as a connection would read it.
pub fn split_input(data: &[u8]) -> (Limits, &[u8], Vec<&[u8]>) {
    let Some((&flags, rest)) = data.split_first() else {
        return (Limits::default(), &[], Vec::new());
    };
    // Bit 0: small limits; bit 7: a client that has not authenticated; bits 1-6:
    // how many read boundaries follow.
    let limits = if flags & 1 == 1 {
        Limits {
            max_bulk_len: 16,
            max_multibulk_len: 8,
            max_inline_len: 24,
            max_depth: 3,
            unauthenticated: flags & 0x80 != 0,
        }
    } else {
        Limits {
            unauthenticated: flags & 0x80 != 0,
            ..Limits::default()
        }
    };
    let cuts = usize::from((flags >> 1) & 0x3f).min(rest.len() / 2);
    let (cut_bytes, stream) = rest.split_at(cuts * 2);
    let mut points: Vec<usize> = cut_bytes
        .chunks_exact(2)
        .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])) % (stream.len() + 1))
        .collect();
    points.push(0);
    points.push(stream.len());
    points.sort_unstable();
    let parts = points.windows(2).map(|w| &stream[w[0]..w[1]]).collect();
    (limits, stream, parts)
}
