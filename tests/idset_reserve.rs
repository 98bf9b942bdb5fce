//! IDSET.LOAD's RESERVE is bounded like any value a client sends: a table it would
//! make larger than `proto-max-bulk-len` is refused. Found while writing the server
//! fuzz targets: `IDSET.LOAD k RESERVE 3000000000 IDS 1` asked for a
//! 32 GB table, the allocation failed and the server aborted.
mod harness;

use harness::TestServer;

fn load(con: &mut redis::Connection, reserve: &str) -> redis::RedisResult<i64> {
    redis::cmd("IDSET.LOAD")
        .arg("k")
        .arg("RESERVE")
        .arg(reserve)
        .arg("IDS")
        .arg(1)
        .query(con)
}

#[test]
fn a_reserve_past_proto_max_bulk_len_is_refused_and_the_server_stays_up() {
    let s = TestServer::start();
    let mut con = s.conn();
    for huge in ["3000000000", "9223372036854775807"] {
        let e = load(&mut con, huge).unwrap_err();
        assert!(
            e.to_string().contains("proto-max-bulk-len"),
            "RESERVE {huge}: {e}"
        );
    }
    let exists: i64 = redis::cmd("EXISTS").arg("k").query(&mut con).unwrap();
    assert_eq!(exists, 0, "a refused load stores nothing");
    assert_eq!(load(&mut con, "1000").unwrap(), 1);

    // The bound follows the setting: 50,000 ids of room is a ~530 KB table, 200,000
    // a ~2.1 MB one.
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("proto-max-bulk-len")
        .arg("1mb")
        .query(&mut con)
        .unwrap();
    assert!(load(&mut con, "200000").is_err());
    assert_eq!(load(&mut con, "50000").unwrap(), 1);
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}
