//! Client memory is kept apart from data: idle connections cost about what they cost
//! in Redis, a connection gives back what its largest request took, what clients
//! hold is reported (INFO `mem_clients_normal`, CLIENT LIST `qbuf` … `tot-mem`),
//! never evicts keys under `maxmemory`, and is bounded by `maxmemory-clients`,
//! which closes the biggest clients and leaves data alone.
//!
//! `used_memory` is exact (the server counts its heap), so the figures here are
//! bytes, not timings.

mod harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use harness::real_redis::RedisServer;
use harness::{info_stat, TestServer};

fn used_memory(con: &mut redis::Connection) -> u64 {
    info_stat(con, "memory", "used_memory")
}

fn clients_memory(con: &mut redis::Connection) -> u64 {
    info_stat(con, "memory", "mem_clients_normal")
}

fn stat(con: &mut redis::Connection, name: &str) -> u64 {
    info_stat(con, "stats", name)
}

fn dbsize(con: &mut redis::Connection) -> u64 {
    redis::cmd("DBSIZE").query(con).unwrap()
}

/// Connects `n` sockets to `port`, each answered once (so the server has surely
/// accepted it and run a request), then left idle.
fn idle_connections(port: u16, n: usize) -> Vec<TcpStream> {
    let socks: Vec<TcpStream> = (0..n)
        .map(|_| {
            let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        })
        .collect();
    for mut s in &socks {
        s.write_all(b"PING\r\n").unwrap();
    }
    for mut s in &socks {
        let mut pong = [0u8; 7];
        s.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"+PONG\r\n");
    }
    socks
}

/// Polls until `connected_clients` is `n` (connections closed by a client end a
/// moment later on the server).
fn wait_clients(con: &mut redis::Connection, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now: u64 = info_stat(con, "clients", "connected_clients");
        if now == n {
            return;
        }
        assert!(Instant::now() < deadline, "{now} clients, waiting for {n}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One field of one client's CLIENT LIST line (`None`: no such client).
fn client_field(con: &mut redis::Connection, id: u64, field: &str) -> Option<String> {
    let line: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("ID")
        .arg(id)
        .query(con)
        .unwrap();
    let line = line.lines().next()?;
    let value = line
        .split(' ')
        .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {field} in {line}"));
    Some(value.to_string())
}

fn client_num(con: &mut redis::Connection, id: u64, field: &str) -> u64 {
    client_field(con, id, field)
        .unwrap_or_else(|| panic!("client {id} is gone"))
        .parse()
        .unwrap()
}

/// A raw connection's CLIENT ID.
fn raw_id(s: &mut TcpStream) -> u64 {
    s.write_all(b"CLIENT ID\r\n").unwrap();
    let line = harness::read_line(s);
    let text = String::from_utf8(line).unwrap();
    text.trim_start_matches(':').trim_end().parse().unwrap()
}

/// Fills the keyspace with `n` strings of `size` bytes (`key:0` …).
fn fill(con: &mut redis::Connection, n: usize, size: usize) {
    let value = vec![b'v'; size];
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("SET").arg(format!("key:{i}")).arg(&value).ignore();
    }
    pipe.query::<()>(con).unwrap();
}

fn keys_present(con: &mut redis::Connection, n: usize) -> u64 {
    let mut cmd = redis::cmd("EXISTS");
    for i in 0..n {
        cmd.arg(format!("key:{i}"));
    }
    cmd.query(con).unwrap()
}

/// Redis's `tot-mem` and friends for this connection, by CLIENT INFO on it.
fn own_client_info(s: &mut TcpStream) -> String {
    s.write_all(b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n")
        .unwrap();
    let header = String::from_utf8(harness::read_line(s)).unwrap();
    let len: usize = header.trim_start_matches('$').trim_end().parse().unwrap();
    let body = harness::read_n(s, len + 2);
    String::from_utf8(body).unwrap()
}

fn field_of(line: &str, field: &str) -> u64 {
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {field} in {line}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn an_idle_connection_costs_about_what_it_costs_in_redis() {
    const N: usize = 1000;
    let srv = TestServer::start();
    let mut con = srv.conn();
    // The harness's readiness probe may not have been let go yet.
    wait_clients(&mut con, 1);
    let used_before = used_memory(&mut con);
    let clients_before = clients_memory(&mut con);
    let socks = idle_connections(srv.port, N);
    let per_connection = (used_memory(&mut con) - used_before) / N as u64;
    let reported = (clients_memory(&mut con) - clients_before) / N as u64;

    let redis = RedisServer::start();
    let mut rcon = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let redis_before = used_memory(&mut rcon);
    let redis_socks = idle_connections(redis.port, N);
    let redis_per_connection = (used_memory(&mut rcon) - redis_before) / N as u64;
    drop(redis_socks);
    eprintln!(
        "used_memory per idle connection: relcache {per_connection} B (reported {reported} B), \
         redis-server {redis_per_connection} B (its query buffers are freed by its cron later)"
    );

    assert!(
        per_connection <= 8 * 1024,
        "an idle connection costs {per_connection} bytes"
    );
    // What clients are said to hold is what they cost, give or take.
    assert!(
        reported * 2 >= per_connection && reported <= per_connection * 2,
        "reported {reported} bytes per connection, measured {per_connection}"
    );

    drop(socks);
    wait_clients(&mut con, 1);
    assert_eq!(clients_memory(&mut con), clients_before);
    assert!(
        used_memory(&mut con) < used_before + 256 * 1024,
        "memory held after the connections closed"
    );
}

#[test]
fn idle_connections_under_maxmemory_evict_no_keys() {
    let srv = TestServer::start_with(&["--maxmemory", "64mb"]);
    let mut con = srv.conn();
    fill(&mut con, 400, 100_000);
    assert_eq!(dbsize(&mut con), 400);

    let socks = idle_connections(srv.port, 1000);
    // Writes after the connections opened make room under maxmemory if they need
    // it: they must find none needed.
    for i in 0..10 {
        let _: () = redis::cmd("SET")
            .arg(format!("late:{i}"))
            .arg("v")
            .query(&mut con)
            .unwrap();
    }
    assert_eq!(stat(&mut con, "evicted_keys"), 0);
    assert_eq!(keys_present(&mut con, 400), 400);
    assert_eq!(dbsize(&mut con), 410);
    assert!(clients_memory(&mut con) >= 1000 * 1024);
    drop(socks);
}

/// A multibulk request of `args` (built here, not formatted per argument by a
/// client library, so millions of arguments stay cheap).
fn multibulk<'a>(args: impl ExactSizeIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a);
        req.extend_from_slice(b"\r\n");
    }
    req
}

#[test]
fn a_connection_gives_back_what_its_largest_request_took() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let mut s = srv.raw();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let id = raw_id(&mut s);
    wait_clients(&mut con, 2);
    let used_before = used_memory(&mut con);
    let clients_before = clients_memory(&mut con);

    // SADD with 5M ids: ~70 MB of request, 5M argument slots.
    let ids: Vec<Vec<u8>> = (1..=5_000_000u64)
        .map(|i| i.to_string().into_bytes())
        .collect();
    let head: [&[u8]; 2] = [b"SADD", b"big"];
    let req = multibulk(
        head.iter()
            .copied()
            .chain(ids.iter().map(|v| v.as_slice()))
            .collect::<Vec<_>>()
            .into_iter(),
    );
    drop(ids);
    s.write_all(&req).unwrap();
    drop(req);
    assert_eq!(harness::read_line(&mut s), b":5000000\r\n");

    let set_size: u64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("big")
        .query(&mut con)
        .unwrap();
    let info = own_client_info(&mut s);
    assert_eq!(field_of(&info, "qbuf"), 0, "{info}");
    assert_eq!(field_of(&info, "argv-mem"), 10, "{info}");
    assert!(field_of(&info, "tot-mem") < 16 * 1024, "{info}");
    assert_eq!(client_num(&mut con, id, "omem"), 0);
    assert_eq!(clients_memory(&mut con), clients_before);
    let held = used_memory(&mut con) - used_before;
    assert!(
        held < set_size + 2 * 1024 * 1024,
        "{held} bytes held after the SADD, the set is {set_size}"
    );

    // EXISTS over 1M keys: 1M argument slots again, on the same connection.
    let keys: Vec<Vec<u8>> = (0..1_000_000u64)
        .map(|i| format!("missing:{i}").into_bytes())
        .collect();
    let exists: [&[u8]; 1] = [b"EXISTS"];
    let req = multibulk(
        exists
            .iter()
            .copied()
            .chain(keys.iter().map(|v| v.as_slice()))
            .collect::<Vec<_>>()
            .into_iter(),
    );
    drop(keys);
    s.write_all(&req).unwrap();
    drop(req);
    assert_eq!(harness::read_line(&mut s), b":0\r\n");
    let info = own_client_info(&mut s);
    assert!(field_of(&info, "tot-mem") < 16 * 1024, "{info}");
    assert_eq!(clients_memory(&mut con), clients_before);
    let held = used_memory(&mut con) - used_before;
    assert!(
        held < set_size + 2 * 1024 * 1024,
        "{held} bytes held after the EXISTS, the set is {set_size}"
    );
}

/// Sends the head of a SET whose value is `announced` bytes, then `sent` bytes of
/// it, and stops there: a request still arriving.
fn start_big_set(
    s: &mut TcpStream,
    key: &str,
    announced: usize,
    sent: usize,
) -> std::io::Result<()> {
    let head = format!(
        "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${announced}\r\n",
        key.len()
    );
    s.write_all(head.as_bytes())?;
    let chunk = vec![b'x'; 1024 * 1024];
    let mut left = sent;
    while left > 0 {
        let n = left.min(chunk.len());
        s.write_all(&chunk[..n])?;
        left -= n;
    }
    Ok(())
}

/// Polls until client `id` has at least `bytes` of query buffer.
fn wait_qbuf(con: &mut redis::Connection, id: u64, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let q = client_num(con, id, "qbuf");
        if q >= bytes {
            return;
        }
        assert!(Instant::now() < deadline, "qbuf {q}, waiting for {bytes}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A bulk header alone, 40 bytes announcing 500 MB, makes the server set aside
/// about a megabyte, not 500 MB (which it would count as used memory): the big
/// argument's own buffer grows as its data arrives.
#[test]
fn a_header_alone_reserves_no_more_than_a_megabyte() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let before = used_memory(&mut con);
    let mut slow = srv.raw();
    let id = raw_id(&mut slow);
    slow.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$500000000\r\nab")
        .unwrap();
    wait_qbuf(&mut con, id, 2);
    let grown = used_memory(&mut con).saturating_sub(before);
    assert!(grown < 4 * 1024 * 1024, "{grown} bytes for a 500 MB header");
    let free = client_num(&mut con, id, "qbuf-free");
    // The megabyte ahead, and the rest of the 16 KB read buffer.
    assert!(free <= 1024 * 1024 + 16 * 1024, "qbuf-free {free}");
}

#[test]
fn a_request_still_arriving_evicts_nothing_under_maxmemory() {
    let srv = TestServer::start_with(&["--maxmemory", "64mb"]);
    let mut con = srv.conn();
    fill(&mut con, 400, 100_000);
    wait_clients(&mut con, 1);
    let clients_before = clients_memory(&mut con);

    let mut slow = srv.raw();
    let id = raw_id(&mut slow);
    let sent = 99 * 1024 * 1024;
    start_big_set(&mut slow, "big", 100 * 1024 * 1024, sent).unwrap();
    wait_qbuf(&mut con, id, sent as u64);

    // The 99 MB are the client's: over maxmemory together with the data, yet
    // nothing is evicted and another client's write goes through.
    assert!(used_memory(&mut con) > 64 * 1024 * 1024);
    let tot = client_num(&mut con, id, "tot-mem");
    assert!(tot >= sent as u64, "tot-mem {tot}");
    assert!(clients_memory(&mut con) >= clients_before + sent as u64);
    let _: () = redis::cmd("SET")
        .arg("meanwhile")
        .arg("ok")
        .query(&mut con)
        .unwrap();
    assert_eq!(stat(&mut con, "evicted_keys"), 0);
    assert_eq!(keys_present(&mut con, 400), 400);
    assert_eq!(dbsize(&mut con), 401);

    drop(slow);
    wait_clients(&mut con, 1);
    assert_eq!(clients_memory(&mut con), clients_before);
    assert_eq!(stat(&mut con, "evicted_keys"), 0);
}

#[test]
fn tot_mem_and_mem_clients_normal_follow_a_request() {
    let srv = TestServer::start();
    let mut con = srv.conn();
    let mut s = srv.raw();
    let id = raw_id(&mut s);
    wait_clients(&mut con, 2);
    let clients_before = clients_memory(&mut con);
    let idle_tot = client_num(&mut con, id, "tot-mem");
    assert_eq!(client_num(&mut con, id, "qbuf"), 0);
    assert_eq!(client_num(&mut con, id, "qbuf-free"), 0);

    // 1 MB of a 2 MB value: in the query buffer, counted for the client.
    start_big_set(&mut s, "k", 2 * 1024 * 1024, 1024 * 1024).unwrap();
    wait_qbuf(&mut con, id, 1024 * 1024);
    let tot = client_num(&mut con, id, "tot-mem");
    assert!(tot >= idle_tot + 1024 * 1024, "tot-mem {tot}");
    let qbuf = client_num(&mut con, id, "qbuf");
    let free = client_num(&mut con, id, "qbuf-free");
    // And the decoder's note of where the SET's arguments lie.
    assert!(tot >= idle_tot + qbuf + free && tot <= idle_tot + qbuf + free + 1024);
    assert_eq!(clients_memory(&mut con), clients_before + tot - idle_tot);

    // The rest arrives: the value is data now, and the buffer is given back.
    s.write_all(&vec![b'x'; 1024 * 1024]).unwrap();
    s.write_all(b"\r\n").unwrap();
    assert_eq!(harness::read_line(&mut s), b"+OK\r\n");
    assert_eq!(client_num(&mut con, id, "tot-mem"), idle_tot);
    assert_eq!(client_num(&mut con, id, "qbuf"), 0);
    assert_eq!(clients_memory(&mut con), clients_before);

    // Commands MULTI queued are the client's too, until EXEC or DISCARD.
    harness::roundtrip(&mut s, b"MULTI\r\n", b"+OK\r\n");
    start_big_set(&mut s, "q", 1024 * 1024, 1024 * 1024).unwrap();
    s.write_all(b"\r\n").unwrap();
    assert_eq!(harness::read_line(&mut s), b"+QUEUED\r\n");
    let multi = client_num(&mut con, id, "multi-mem");
    assert!(multi >= 1024 * 1024, "multi-mem {multi}");
    assert_eq!(client_num(&mut con, id, "tot-mem"), idle_tot + multi);
    harness::roundtrip(&mut s, b"DISCARD\r\n", b"+OK\r\n");
    assert_eq!(client_num(&mut con, id, "multi-mem"), 0);
    assert_eq!(client_num(&mut con, id, "tot-mem"), idle_tot);
    let stats: redis::Value = redis::cmd("MEMORY").arg("STATS").query(&mut con).unwrap();
    let text = format!("{stats:?}");
    assert!(text.contains("clients.normal"), "{text}");
}

#[test]
fn maxmemory_clients_closes_the_biggest_client_and_leaves_data_alone() {
    let srv = TestServer::start_with(&["--maxmemory-clients", "10mb"]);
    let mut con = srv.conn();
    assert_eq!(
        harness::config_get(&mut con, "maxmemory-clients"),
        "10485760"
    );
    let _: () = redis::cmd("CLIENT")
        .arg("NO-EVICT")
        .arg("on")
        .query(&mut con)
        .unwrap();
    fill(&mut con, 100, 1000);
    wait_clients(&mut con, 1);
    let mut idle = srv.raw();
    let idle_id = raw_id(&mut idle);

    // 20 MB of a request: the biggest client, and over the bound: closed.
    let mut big = srv.raw();
    let big_id = raw_id(&mut big);
    // The server may close the socket while this is still being written.
    let _ = start_big_set(&mut big, "big", 30 * 1024 * 1024, 20 * 1024 * 1024);
    let mut buf = [0u8; 64];
    assert!(
        matches!(big.read(&mut buf), Ok(0) | Err(_)),
        "the biggest client was not closed"
    );
    wait_clients(&mut con, 2);
    assert!(client_field(&mut con, big_id, "id").is_none());
    assert_eq!(stat(&mut con, "evicted_clients"), 1);
    harness::roundtrip(&mut idle, b"PING\r\n", b"+PONG\r\n");
    assert_eq!(dbsize(&mut con), 100);
    assert_eq!(stat(&mut con, "evicted_keys"), 0);

    // A client that asked not to be evicted stays, and the others go instead.
    let mut keeper = srv.raw();
    let keeper_id = raw_id(&mut keeper);
    harness::roundtrip(&mut keeper, b"CLIENT NO-EVICT on\r\n", b"+OK\r\n");
    assert!(client_field(&mut con, keeper_id, "flags")
        .unwrap()
        .contains('e'));
    start_big_set(&mut keeper, "kept", 30 * 1024 * 1024, 20 * 1024 * 1024).unwrap();
    wait_qbuf(&mut con, keeper_id, 20 * 1024 * 1024);
    let mut buf = [0u8; 64];
    assert!(
        matches!(idle.read(&mut buf), Ok(0) | Err(_)),
        "the idle client was not closed"
    );
    wait_clients(&mut con, 2);
    assert!(client_field(&mut con, idle_id, "id").is_none());
    assert_eq!(stat(&mut con, "evicted_clients"), 2);
    assert_eq!(dbsize(&mut con), 100);

    // Lifting the bound lets the keeper finish.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-clients")
        .arg("0")
        .query(&mut con)
        .unwrap();
    keeper.write_all(&vec![b'x'; 10 * 1024 * 1024]).unwrap();
    keeper.write_all(b"\r\n").unwrap();
    assert_eq!(harness::read_line(&mut keeper), b"+OK\r\n");
    assert_eq!(dbsize(&mut con), 101);
    assert_eq!(stat(&mut con, "evicted_keys"), 0);
}

#[test]
fn maxmemory_clients_takes_bytes_or_a_percentage_as_redis_does() {
    let srv = TestServer::start();
    let redis = RedisServer::start();
    let mut mine = srv.conn();
    let mut theirs = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.port))
        .unwrap()
        .get_connection()
        .unwrap();
    for value in ["10%", "1000", "1mb", "0%", "101%", "-1", "lots", "0"] {
        let set = |con: &mut redis::Connection| -> String {
            match redis::cmd("CONFIG")
                .arg("SET")
                .arg("maxmemory-clients")
                .arg(value)
                .query::<()>(con)
            {
                Ok(()) => harness::config_get(con, "maxmemory-clients"),
                Err(e) => format!("{e}"),
            }
        };
        assert_eq!(
            set(&mut mine),
            set(&mut theirs),
            "maxmemory-clients {value}"
        );
    }
    let info: String = redis::cmd("INFO").arg("memory").query(&mut mine).unwrap();
    assert_eq!(harness::info_value::<u64>(&info, "mem_clients_slaves"), 0);
    assert!(harness::info_value::<u64>(&info, "mem_clients_normal") > 0);
}

/// A queued command keeps only its own arguments: in a pipeline where each small
/// queued SET arrives in the same read as a large command, the queue must not keep
/// the large command's buffer alive (it did: 256 MB pinned, 250 KB reported).
#[test]
fn commands_queued_in_multi_keep_only_their_own_bytes() {
    const ROUNDS: usize = 300;
    let s = TestServer::start();
    let mut admin = s.conn();
    let before = used_memory(&mut admin);
    let mut c = s.raw();
    c.write_all(b"MULTI\r\n").unwrap();
    let big = vec![b'x'; 100 << 10];
    let mut round = Vec::new();
    round.extend_from_slice(b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n");
    round.extend_from_slice(format!("*2\r\n$9\r\nNOSUCHCMD\r\n${}\r\n", big.len()).as_bytes());
    round.extend_from_slice(&big);
    round.extend_from_slice(b"\r\n");
    for _ in 0..ROUNDS {
        c.write_all(&round).unwrap();
    }
    // +OK, then per round +QUEUED and the unknown command's error.
    let mut replies = Vec::new();
    let mut buf = [0u8; 64 << 10];
    while replies.iter().filter(|&&b| b == b'\n').count() < 1 + 2 * ROUNDS {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed");
        replies.extend_from_slice(&buf[..n]);
    }
    let grown = used_memory(&mut admin).saturating_sub(before);
    let reported = clients_memory(&mut admin);
    assert!(
        grown < 8 << 20,
        "{ROUNDS} queued SETs grew used_memory by {grown} bytes ({reported} reported as client memory)"
    );
    c.write_all(b"DISCARD\r\n").unwrap();
}

/// What a command keeps from its arguments beyond its reply (a subscription's
/// channel, a client's library name) is a copy: a slice would keep the whole
/// read buffer the request arrived in, 16 KB for a name of 20 bytes.
#[test]
fn kept_arguments_do_not_keep_their_read_buffers() {
    const N: usize = 2000;
    let srv = TestServer::start();
    let mut con = srv.conn();
    let mut sub = srv.raw();
    let mut named: Vec<TcpStream> = Vec::new();
    let before = used_memory(&mut con);
    // One request per round trip, so each arrives in a read buffer of its own.
    for i in 0..N {
        let channel = format!("channel:{i}");
        let request = multibulk([b"SUBSCRIBE".as_slice(), channel.as_bytes()].into_iter());
        sub.write_all(&request).unwrap();
        let reply = format!(
            "*3\r\n$9\r\nsubscribe\r\n${}\r\n{channel}\r\n:{}\r\n",
            channel.len(),
            i + 1
        );
        let mut got = vec![0; reply.len()];
        sub.read_exact(&mut got).unwrap();
        assert_eq!(got, reply.as_bytes());
    }
    for i in 0..N / 10 {
        let mut s = srv.raw();
        let name = format!("lib{i}");
        let request = multibulk(
            [
                b"CLIENT".as_slice(),
                b"SETINFO",
                b"LIB-NAME",
                name.as_bytes(),
            ]
            .into_iter(),
        );
        harness::roundtrip(&mut s, &request, b"+OK\r\n");
        named.push(s);
    }
    let grown = used_memory(&mut con) - before;
    let per_subscription = grown / N as u64;
    // Slices would have held 16 KB each (40 MB here); copies, connections and the
    // registries' entries come to a few hundred bytes each.
    assert!(
        per_subscription < 2048,
        "{grown} bytes for {N} subscriptions and {} named clients",
        named.len()
    );
}
