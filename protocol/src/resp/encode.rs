//! Encoding frames, version-aware.
//!
//! Everything here appends to a `BytesMut` synchronously: lengths are known before a
//! header is written, integers go through `itoa` and doubles through `ryu`, so
//! encoding a reply never allocates beyond growing the output buffer.

use bytes::{BufMut, BytesMut};

use super::{Frame, Protocol};

const CRLF: &[u8] = b"\r\n";

pub(super) fn encode(frame: &Frame, proto: Protocol, out: &mut BytesMut) {
    let resp3 = proto == Protocol::Resp3;
    match frame {
        Frame::Simple(s) => line(out, b'+', s),
        Frame::Error(s) => line(out, b'-', s),
        Frame::Integer(n) => write_integer(out, *n),
        Frame::Bulk(b) => write_bulk(out, b),
        Frame::Null if resp3 => out.put_slice(b"_\r\n"),
        Frame::Null => out.put_slice(b"$-1\r\n"),
        Frame::NullArray if resp3 => out.put_slice(b"_\r\n"),
        Frame::NullArray => out.put_slice(b"*-1\r\n"),
        Frame::Array(items) => aggregate(out, b'*', items, proto),
        Frame::Integers(items) => integers(out, items),
        Frame::Set(items) => aggregate(out, if resp3 { b'~' } else { b'*' }, items, proto),
        Frame::Push(items) => aggregate(out, if resp3 { b'>' } else { b'*' }, items, proto),
        Frame::Map(pairs) => {
            if resp3 {
                header(out, b'%', pairs.len());
            } else {
                header(out, b'*', pairs.len() * 2);
            }
            for (k, v) in pairs {
                encode(k, proto, out);
                encode(v, proto, out);
            }
        }
        Frame::Double(d) => {
            let mut buf = ryu::Buffer::new();
            let text: &[u8] = if d.is_nan() {
                b"nan"
            } else if d.is_infinite() {
                if *d > 0.0 {
                    b"inf"
                } else {
                    b"-inf"
                }
            } else {
                format_double(&mut buf, *d).as_bytes()
            };
            if resp3 {
                line(out, b',', text);
            } else {
                write_bulk(out, text);
            }
        }
        Frame::Boolean(b) if resp3 => out.put_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
        Frame::Boolean(b) => write_integer(out, i64::from(*b)),
        Frame::BigNumber(n) if resp3 => line(out, b'(', n),
        Frame::BigNumber(n) => write_bulk(out, n),
        Frame::Verbatim { format, text } if resp3 => {
            header(out, b'=', text.len() + 4);
            out.put_slice(format);
            out.put_u8(b':');
            out.put_slice(text);
            out.put_slice(CRLF);
        }
        Frame::Verbatim { text, .. } => write_bulk(out, text),
    }
}

/// Shortest round-trip text for a finite double, without ryu's trailing `.0` on
/// integral values (Redis prints `3`, not `3.0`).
fn format_double(buf: &mut ryu::Buffer, d: f64) -> &str {
    let s = buf.format_finite(d);
    s.strip_suffix(".0").unwrap_or(s)
}

fn aggregate(out: &mut BytesMut, kind: u8, items: &[Frame], proto: Protocol) {
    header(out, kind, items.len());
    // Room for the smallest elements at once, and those written in place: a 0/1
    // flag among other frames (WHICH's, EXEC's) is then a four-byte copy, not a
    // call and a capacity check (callgrind: 56 → 21 instructions an element).
    // Replies made only of integers are `Frame::Integers`, below.
    out.reserve(items.len() * 4);
    for item in items {
        match *item {
            Frame::Integer(n @ 0..=9) => out.put_slice(&[b':', b'0' + n as u8, b'\r', b'\n']),
            _ => encode(item, proto, out),
        }
    }
}

fn integers(out: &mut BytesMut, items: &[i64]) {
    const GROUP: usize = 64;
    header(out, b'*', items.len());
    // Mostly 0/1 flags: a group of one-digit values is spelled out on the stack
    // and appended in one copy, a few instructions an element, where a
    // `write_integer` each (a call and a capacity check) took 28.
    let mut spelled = [0u8; 4 * GROUP];
    for group in items.chunks(GROUP) {
        if group.iter().all(|n| (0..10).contains(n)) {
            for (dst, &n) in spelled.chunks_exact_mut(4).zip(group) {
                dst.copy_from_slice(&[b':', b'0' + n as u8, b'\r', b'\n']);
            }
            out.put_slice(&spelled[..4 * group.len()]);
        } else {
            group.iter().for_each(|&n| write_integer(out, n));
        }
    }
}

fn line(out: &mut BytesMut, kind: u8, text: &[u8]) {
    out.reserve(text.len() + 3);
    out.put_u8(kind);
    out.put_slice(text);
    out.put_slice(CRLF);
}

fn header(out: &mut BytesMut, kind: u8, len: usize) {
    let mut buf = itoa::Buffer::new();
    line(out, kind, buf.format(len).as_bytes());
}

/// Appends `:n\r\n`.
pub fn write_integer(out: &mut BytesMut, n: i64) {
    // 0 and 1 flags and small counts are most integer replies: one four-byte
    // write.
    if (0..10).contains(&n) {
        out.put_slice(&[b':', b'0' + n as u8, b'\r', b'\n']);
        return;
    }
    let mut buf = itoa::Buffer::new();
    line(out, b':', buf.format(n).as_bytes());
}

/// Appends `*n\r\n`, the header of an array of `n` frames (requests are arrays in
/// both protocol versions).
pub fn write_array_header(out: &mut BytesMut, n: usize) {
    header(out, b'*', n);
}

/// Appends a bulk string.
pub fn write_bulk(out: &mut BytesMut, data: &[u8]) {
    let mut buf = itoa::Buffer::new();
    let len = buf.format(data.len()).as_bytes();
    out.reserve(data.len() + len.len() + 5);
    out.put_u8(b'$');
    out.put_slice(len);
    out.put_slice(CRLF);
    out.put_slice(data);
    out.put_slice(CRLF);
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn enc(f: Frame, p: Protocol) -> Vec<u8> {
        f.to_bytes(p).to_vec()
    }

    #[test]
    fn scalars() {
        use Protocol::*;
        assert_eq!(enc(Frame::ok(), Resp2), b"+OK\r\n");
        assert_eq!(enc(Frame::error("ERR x\r\ny"), Resp2), b"-ERR x  y\r\n");
        assert_eq!(enc(Frame::Integer(-7), Resp3), b":-7\r\n");
        assert_eq!(enc(Frame::bulk("foo"), Resp2), b"$3\r\nfoo\r\n");
        assert_eq!(enc(Frame::bulk(""), Resp2), b"$0\r\n\r\n");
        assert_eq!(enc(Frame::Null, Resp2), b"$-1\r\n");
        assert_eq!(enc(Frame::NullArray, Resp2), b"*-1\r\n");
        assert_eq!(enc(Frame::Null, Resp3), b"_\r\n");
        assert_eq!(enc(Frame::Boolean(true), Resp2), b":1\r\n");
        assert_eq!(enc(Frame::Boolean(false), Resp3), b"#f\r\n");
        assert_eq!(enc(Frame::Double(3.0), Resp3), b",3\r\n");
        assert_eq!(enc(Frame::Double(1.5), Resp2), b"$3\r\n1.5\r\n");
        assert_eq!(enc(Frame::Double(f64::INFINITY), Resp3), b",inf\r\n");
    }

    #[test]
    fn small_integers_in_aggregates_are_written_in_place() {
        let items = vec![
            Frame::Integer(0),
            Frame::Integer(9),
            Frame::Integer(10),
            Frame::Integer(-1),
            Frame::Array(vec![Frame::Integer(1)]),
            Frame::Null,
        ];
        assert_eq!(
            enc(Frame::Array(items.clone()), Protocol::Resp2),
            b"*6\r\n:0\r\n:9\r\n:10\r\n:-1\r\n*1\r\n:1\r\n$-1\r\n"
        );
        assert_eq!(
            enc(Frame::Set(items), Protocol::Resp3),
            b"~6\r\n:0\r\n:9\r\n:10\r\n:-1\r\n*1\r\n:1\r\n_\r\n"
        );
    }

    #[test]
    fn flat_integers_are_an_array_of_integers_on_the_wire() {
        let mut values = vec![0, 1, 9, 10, -1, i64::MIN, i64::MAX];
        // Whole groups of flags, and a group with one larger value in it.
        values.extend((0..200).map(|i| i % 2));
        values.extend((0..100).map(|i| if i == 70 { 12 } else { i % 10 }));
        let array = Frame::Array(values.iter().copied().map(Frame::Integer).collect());
        for proto in [Protocol::Resp2, Protocol::Resp3] {
            assert_eq!(
                enc(Frame::Integers(values.clone()), proto),
                enc(array.clone(), proto)
            );
        }
        assert_eq!(enc(Frame::Integers(vec![]), Protocol::Resp3), b"*0\r\n");
    }

    #[test]
    fn aggregates_downgrade_in_resp2() {
        let map = Frame::Map(vec![(Frame::bulk("a"), Frame::Integer(1))]);
        assert_eq!(
            enc(map.clone(), Protocol::Resp2),
            b"*2\r\n$1\r\na\r\n:1\r\n"
        );
        assert_eq!(enc(map, Protocol::Resp3), b"%1\r\n$1\r\na\r\n:1\r\n");
        let set = Frame::Set(vec![Frame::Integer(1)]);
        assert_eq!(enc(set.clone(), Protocol::Resp2), b"*1\r\n:1\r\n");
        assert_eq!(enc(set, Protocol::Resp3), b"~1\r\n:1\r\n");
        let v = Frame::Verbatim {
            format: *b"txt",
            text: Bytes::from_static(b"hi"),
        };
        assert_eq!(enc(v.clone(), Protocol::Resp3), b"=6\r\ntxt:hi\r\n");
        assert_eq!(enc(v, Protocol::Resp2), b"$2\r\nhi\r\n");
    }
}
