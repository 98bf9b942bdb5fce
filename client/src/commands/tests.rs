//! Reply parsing for both protocol versions, and typed pipelines over a fake server.

use relcache_protocol::resp::{parse_frame, Limits, Protocol};

use super::*;

const BOTH: [Protocol; 2] = [Protocol::Resp2, Protocol::Resp3];

/// `frame` as a client speaking `proto` receives it: encoded the way the server
/// encodes it for that version, then parsed back (so RESP3 nulls and sets, and
/// their RESP2 downgrades, are what the parsers see).
fn wire(frame: &Frame, proto: Protocol) -> Frame {
    let bytes = frame.to_bytes(proto);
    let (frame, used) = parse_frame(&bytes, &Limits::default()).unwrap().unwrap();
    assert_eq!(used, bytes.len());
    frame
}

fn args<T>(cmd: &Cmd<T>) -> Vec<&[u8]> {
    cmd.args().iter().map(|a| &a[..]).collect()
}

fn ints(ns: &[i64]) -> Frame {
    Frame::Array(ns.iter().map(|&n| Frame::Integer(n)).collect())
}

fn assert_unexpected<T: fmt::Debug>(result: Result<T, Error>) {
    let err = result.unwrap_err();
    assert!(err.is_unexpected_reply(), "{err:?}");
}

#[test]
fn load_sends_options_before_the_payload() {
    let opts = LoadOpts {
        ttl: Some(Duration::from_micros(1_500_001)),
        lease: Some(7),
        seq: Some(42),
    };
    let cmd = Cmd::idset_load_ids("k", &[1, 258], opts);
    let mut packed = 1u64.to_le_bytes().to_vec();
    packed.extend_from_slice(&258u64.to_le_bytes());
    let want: Vec<&[u8]> = vec![
        b"IDSET.LOAD",
        b"k",
        b"PX",
        b"1501",
        b"LEASE",
        b"7",
        b"SEQ",
        b"42",
        b"PACKED",
        &packed,
    ];
    assert_eq!(args(&cmd), want);
    let table = build_table(&[5]);
    let cmd = Cmd::idset_load_table("k", table.clone(), LoadOpts::default());
    assert_eq!(args(&cmd), [&b"IDSET.LOAD"[..], b"k", b"TABLE", &table]);
    assert_eq!(cmd.blocks_for(), Duration::ZERO);
}

#[test]
fn load_is_stored_or_refused() {
    for proto in BOTH {
        let ok = || Cmd::idset_load_ids("k", &[1], LoadOpts::default());
        assert!(ok().parse(wire(&Frame::ok(), proto)).unwrap());
        assert!(ok().parse(wire(&Frame::Integer(1), proto)).unwrap());
        assert!(!ok().parse(wire(&Frame::Null, proto)).unwrap());
        assert_unexpected(ok().parse(wire(&Frame::simple("QUEUED"), proto)));
    }
}

#[test]
fn error_replies_are_server_errors() {
    let err = Cmd::idset_card("k")
        .parse(Frame::error("WRONGTYPE Operation against a key"))
        .unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
}

#[test]
fn exists_tells_a_miss_from_a_no() {
    for proto in BOTH {
        let exists = || Cmd::idset_exists("k", 42);
        assert_eq!(
            exists().parse(wire(&Frame::Integer(1), proto)).unwrap(),
            Some(true)
        );
        assert_eq!(
            exists().parse(wire(&Frame::Integer(0), proto)).unwrap(),
            Some(false)
        );
        assert_eq!(exists().parse(wire(&Frame::Null, proto)).unwrap(), None);
        assert_unexpected(exists().parse(wire(&Frame::Integer(2), proto)));
        assert_unexpected(exists().parse(wire(&Frame::bulk("1"), proto)));
    }
    assert_eq!(
        args(&Cmd::idset_exists("k", 42)),
        [&b"IDSET.EXISTS"[..], b"k", b"42"]
    );
}

#[test]
fn mexists_reads_flags_in_order() {
    for proto in BOTH {
        let m = || Cmd::idset_mexists("k", &[1, 2, 3]);
        assert_eq!(
            m().parse(wire(&ints(&[1, 0, 1]), proto)).unwrap(),
            Some(vec![true, false, true])
        );
        assert_eq!(m().parse(wire(&Frame::NullArray, proto)).unwrap(), None);
        assert_unexpected(m().parse(wire(&ints(&[1, 0, 5]), proto)));
        assert_unexpected(m().parse(wire(&Frame::Integer(1), proto)));
        // One answer per id asked, no more and no fewer: a short reply would pair
        // the answers with the wrong ids.
        assert_unexpected(m().parse(wire(&ints(&[1, 0]), proto)));
        assert_unexpected(m().parse(wire(&ints(&[1, 0, 1, 1]), proto)));
    }
    // A RESP3 set has no order to pair answers with ids by.
    let set = Frame::Set(vec![Frame::Integer(1)]);
    assert_unexpected(Cmd::idset_mexists("k", &[1]).parse(set));
}

#[test]
fn bitmaps_decode_lsb_first_to_exactly_one_flag_per_id() {
    let ids: Vec<u64> = (0..10).collect();
    // Ids 0, 2 and 9: bits 0 and 2 of byte 0, bit 1 of byte 1. The unused high
    // bits of the last byte are set and must be ignored.
    let bits = Frame::bulk(vec![0b0000_0101, 0b1111_1110]);
    let mut want = vec![false; 10];
    want[0] = true;
    want[2] = true;
    want[9] = true;
    for proto in BOTH {
        let m = || Cmd::idset_mexistsbin("k", &ids);
        assert_eq!(m().parse(wire(&bits, proto)).unwrap(), Some(want.clone()));
        assert_eq!(m().parse(wire(&Frame::Null, proto)).unwrap(), None);
        // One byte short, one byte long.
        assert_unexpected(m().parse(wire(&Frame::bulk(vec![0u8]), proto)));
        assert_unexpected(m().parse(wire(&Frame::bulk(vec![0u8; 3]), proto)));
    }
    let none = Cmd::idset_mexistsbin("k", &[]);
    assert_eq!(none.parse(Frame::bulk("")).unwrap(), Some(vec![]));
    let cmd = Cmd::idset_mexistsbin("k", &[u64::MAX]);
    assert_eq!(args(&cmd), [&b"IDSET.MEXISTSBIN"[..], b"k", &[0xff; 8]]);
}

#[test]
fn mexistsbin_lease_is_an_answer_a_grant_or_busy() {
    let opts = LeaseOpts {
        px: Some(Duration::from_secs(2)),
        wait: Some(Duration::from_millis(250)),
    };
    let cmd = Cmd::idset_mexistsbin_lease("k", &[3], opts);
    assert_eq!(
        args(&cmd),
        [
            &b"IDSET.MEXISTSBIN"[..],
            b"k",
            &3u64.to_le_bytes(),
            b"LEASE",
            b"PX",
            b"2000",
            b"BLOCK",
            b"250"
        ]
    );
    assert_eq!(cmd.blocks_for(), Duration::from_millis(250));
    for proto in BOTH {
        let m = || Cmd::idset_mexistsbin_lease("k", &[3, 4], LeaseOpts::default());
        assert_eq!(
            m().parse(wire(&Frame::bulk(vec![0b10]), proto)).unwrap(),
            Leased::Hit(vec![false, true])
        );
        assert_eq!(
            m().parse(wire(&Frame::Integer(77), proto)).unwrap(),
            Leased::Granted(77)
        );
        assert_eq!(m().parse(wire(&Frame::Null, proto)).unwrap(), Leased::Busy);
        assert_unexpected(m().parse(wire(&Frame::Integer(0), proto)));
        assert_unexpected(m().parse(wire(&Frame::Integer(-3), proto)));
        assert_unexpected(m().parse(wire(&Frame::bulk(vec![0u8; 2]), proto)));
    }
}

#[test]
fn lease_is_present_granted_or_busy() {
    let cmd = Cmd::idset_lease("k", LeaseOpts::default());
    assert_eq!(args(&cmd), [&b"IDSET.LEASE"[..], b"k"]);
    assert_eq!(cmd.blocks_for(), Duration::ZERO);
    for proto in BOTH {
        let l = || Cmd::idset_lease("k", LeaseOpts::default());
        assert_eq!(
            l().parse(wire(&Frame::Integer(0), proto)).unwrap(),
            Leased::Hit(())
        );
        assert_eq!(
            l().parse(wire(&Frame::Integer(9), proto)).unwrap(),
            Leased::Granted(9)
        );
        assert_eq!(l().parse(wire(&Frame::Null, proto)).unwrap(), Leased::Busy);
        assert_unexpected(l().parse(wire(&Frame::ok(), proto)));
        let release = || Cmd::idset_release("k", 9);
        assert!(release().parse(wire(&Frame::Integer(1), proto)).unwrap());
        assert!(!release().parse(wire(&Frame::Integer(0), proto)).unwrap());
        assert_unexpected(release().parse(wire(&Frame::Null, proto)));
    }
    assert_eq!(
        args(&Cmd::idset_release("k", 9)),
        [&b"IDSET.RELEASE"[..], b"k", b"9"]
    );
}

#[test]
fn counts_and_their_misses() {
    for proto in BOTH {
        assert_eq!(
            Cmd::idset_add("k", &[1])
                .parse(wire(&Frame::Integer(1), proto))
                .unwrap(),
            1
        );
        assert_unexpected(Cmd::idset_add("k", &[1]).parse(wire(&Frame::Null, proto)));
        let xx = || Cmd::idset_add_xx("k", &[1, 2]);
        assert_eq!(
            xx().parse(wire(&Frame::Integer(2), proto)).unwrap(),
            Some(2)
        );
        assert_eq!(xx().parse(wire(&Frame::Null, proto)).unwrap(), None);
        assert_unexpected(xx().parse(wire(&Frame::Integer(-1), proto)));
        assert_eq!(
            Cmd::idset_rem("k", &[1])
                .parse(wire(&Frame::Null, proto))
                .unwrap(),
            None
        );
        assert_eq!(
            Cmd::idset_card("k")
                .parse(wire(&Frame::Integer(0), proto))
                .unwrap(),
            Some(0)
        );
        assert_eq!(
            Cmd::del(&["a", "b"])
                .parse(wire(&Frame::Integer(2), proto))
                .unwrap(),
            2
        );
        Cmd::ping()
            .parse(wire(&Frame::simple("PONG"), proto))
            .unwrap();
        assert_unexpected(Cmd::ping().parse(wire(&Frame::ok(), proto)));
    }
    assert_eq!(
        args(&Cmd::idset_add_xx("k", &[1, 2])),
        [&b"IDSET.ADD"[..], b"k", b"XX", b"1", b"2"]
    );
}

#[test]
fn members_unpack() {
    let mut packed = 7u64.to_le_bytes().to_vec();
    packed.extend_from_slice(&u64::MAX.to_le_bytes());
    for proto in BOTH {
        let m = || Cmd::idset_members("k");
        assert_eq!(
            m().parse(wire(&Frame::bulk(packed.clone()), proto))
                .unwrap(),
            Some(vec![7, u64::MAX])
        );
        assert_eq!(m().parse(wire(&Frame::Null, proto)).unwrap(), None);
        assert_unexpected(m().parse(wire(&Frame::bulk(vec![1u8; 9]), proto)));
    }
    assert_eq!(
        args(&Cmd::idset_members("k")),
        [&b"IDSET.MEMBERS"[..], b"k", b"PACKED"]
    );
}

#[test]
fn sequenced_write_throughs_say_which_change_they_are() {
    assert_eq!(
        args(&Cmd::idset_add_xx_seq("k", 17, &[5, 6])),
        [&b"IDSET.ADD"[..], b"k", b"XX", b"SEQ", b"17", b"5", b"6"]
    );
    assert_eq!(
        args(&Cmd::idset_rem_seq("k", 18, &[5])),
        [&b"IDSET.REM"[..], b"k", b"SEQ", b"18", b"5"]
    );
    for proto in BOTH {
        let add = || Cmd::idset_add_xx_seq("k", 1, &[5]);
        assert_eq!(
            add().parse(wire(&Frame::Integer(1), proto)).unwrap(),
            Some(1)
        );
        // Missing, or dropped because the change came late: either way not cached.
        assert_eq!(add().parse(wire(&Frame::Null, proto)).unwrap(), None);
        let rem = || Cmd::idset_rem_seq("k", 1, &[5]);
        assert_eq!(
            rem().parse(wire(&Frame::Integer(0), proto)).unwrap(),
            Some(0)
        );
        assert_unexpected(rem().parse(wire(&Frame::ok(), proto)));
    }
}

#[test]
fn which_keeps_misses_apart() {
    let reply = Frame::Array(vec![Frame::Integer(1), Frame::Null, Frame::Integer(0)]);
    for proto in BOTH {
        let w = || Cmd::idset_which(5, &["a", "b", "c"]);
        assert_eq!(
            w().parse(wire(&reply, proto)).unwrap(),
            [Some(true), None, Some(false)]
        );
        assert_unexpected(w().parse(wire(&Frame::Null, proto)));
        let short = Frame::Array(vec![Frame::Integer(1), Frame::Null]);
        assert_unexpected(w().parse(wire(&short, proto)));
    }
    assert_eq!(
        args(&Cmd::idset_which(5, &["a", "b"])),
        [&b"IDSET.WHICH"[..], b"5", b"a", b"b"]
    );
}

#[test]
fn sinter_reads_arrays_and_resp3_sets_sorted() {
    let ids = |ids: &[&str]| {
        ids.iter()
            .map(|id| Frame::bulk(id.to_string()))
            .collect::<Vec<_>>()
    };
    for proto in BOTH {
        let s = || Cmd::sinter(&["a", "b"]);
        let set = Frame::Set(ids(&["30", "18446744073709551615", "0"]));
        assert_eq!(s().parse(wire(&set, proto)).unwrap(), [0, 30, u64::MAX]);
        assert_eq!(
            s().parse(wire(&Frame::Array(vec![]), proto)).unwrap(),
            Vec::<u64>::new()
        );
        assert_unexpected(s().parse(wire(&Frame::Array(ids(&["12", "x"])), proto)));
        assert_unexpected(s().parse(wire(&Frame::Array(ids(&["18446744073709551616"])), proto)));
    }
}

#[test]
fn unexpected_replies_are_described_briefly() {
    let err = Cmd::idset_members("k")
        .parse(Frame::bulk(vec![b'x'; 10_001]))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("unexpected reply: wanted packed ids, got Bulk("),
        "{text}"
    );
    assert!(text.len() < 150, "{text}");
}

#[test]
fn durations_round_up_to_whole_milliseconds_and_no_wait_is_not_forever() {
    let lease = |px: Option<Duration>, wait: Option<Duration>| {
        let cmd = Cmd::idset_lease("k", LeaseOpts { px, wait });
        cmd.args()[2..]
            .iter()
            .map(|a| a.to_vec())
            .collect::<Vec<_>>()
    };
    let ms = Duration::from_millis;
    assert_eq!(
        lease(Some(Duration::from_nanos(1)), None),
        [b"PX".to_vec(), b"1".to_vec()]
    );
    assert_eq!(lease(None, Some(ms(5))), [b"BLOCK".to_vec(), b"5".to_vec()]);
    assert_eq!(
        lease(None, Some(Duration::from_micros(5_001))),
        [b"BLOCK".to_vec(), b"6".to_vec()]
    );
    // BLOCK 0 would wait until the lease resolves, the opposite of "don't wait".
    assert!(lease(None, Some(Duration::ZERO)).is_empty());
    // The time allowed for a wait is the time asked for, as sent.
    let waits = |wait| Cmd::idset_lease("k", LeaseOpts { px: None, wait }).blocks_for();
    assert_eq!(waits(Some(Duration::from_micros(500))), ms(1));
    assert_eq!(waits(Some(Duration::from_micros(5_001))), ms(6));
    assert_eq!(waits(Some(Duration::ZERO)), Duration::ZERO);
    assert_eq!(waits(None), Duration::ZERO);
    // A blocking command typed by the caller says so itself.
    let raw = Cmd::new(vec![Bytes::from_static(b"IDSET.LEASE")], Ok);
    assert_eq!(raw.blocking(Duration::from_nanos(1)).blocks_for(), ms(1));
}

/// A fake server answering each command by its name, over an in-memory pipe.
fn scripted(reply: impl Fn(&[u8]) -> Frame + Send + 'static) -> Client<tokio::io::DuplexStream> {
    use relcache_protocol::resp::RequestDecoder;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (near, mut far) = tokio::io::duplex(4096);
    tokio::spawn(async move {
        let (mut buf, mut args) = (BytesMut::new(), Vec::new());
        let mut decoder = RequestDecoder::default();
        while far.read_buf(&mut buf).await.is_ok_and(|n| n > 0) {
            while decoder.decode(&mut buf, &mut args).unwrap() {
                let out = reply(&args[0]).to_bytes(Protocol::Resp2);
                far.write_all(&out).await.unwrap();
            }
        }
    });
    Client::new(near)
}

#[tokio::test]
async fn typed_pipelines_answer_each_command_on_its_own() {
    let mut client = scripted(|name| match name {
        b"IDSET.CARD" | b"IDSET.MEMBERS" => Frame::Integer(3),
        b"IDSET.EXISTS" => Frame::Null,
        _ => Frame::error("ERR unknown command"),
    });
    let cmds = vec![
        Cmd::idset_card("a"),
        Cmd::new(vec![Bytes::from_static(b"NOPE")], |_| Ok(None)),
        Cmd::idset_card("b"),
        Cmd::new(vec![Bytes::from_static(b"IDSET.EXISTS")], |f| {
            nil_or(f, count)
        }),
    ];
    let answers = client.run_pipeline(cmds).await.unwrap();
    assert_eq!(answers.len(), 4);
    assert_eq!(answers[0].as_ref().unwrap(), &Some(3));
    assert_eq!(answers[1].as_ref().unwrap_err().code(), Some("ERR"));
    assert_eq!(answers[2].as_ref().unwrap(), &Some(3));
    assert_eq!(answers[3].as_ref().unwrap(), &None);
    // A wrong shape is the caller's answer, not the connection's end.
    assert!(client.idset_exists("a", 1).await.unwrap().is_none());
    assert!(client
        .idset_members("a")
        .await
        .unwrap_err()
        .is_unexpected_reply());
    assert!(client.is_usable());
    assert_eq!(client.idset_card("a").await.unwrap(), Some(3));
}
