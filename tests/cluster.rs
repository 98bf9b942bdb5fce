//! Cluster mode end to end: real `relcache-server` nodes made into a cluster by
//! `redis-cli --cluster create`, checked by `--cluster check`, driven by the
//! `redis` crate's cluster client and by hand, and compared with a real
//! redis-server in cluster mode where the replies are Redis's.

mod harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use harness::fenced::{same_answers, Conn};
use harness::real_redis::RedisServer;
use harness::{tool, TempDir, TestServer};

/// Nodes started in cluster mode, not yet joined.
fn nodes(n: usize) -> Vec<TestServer> {
    (0..n)
        .map(|_| {
            TestServer::start_with(&["--cluster-enabled", "yes", "--cluster-node-timeout", "3000"])
        })
        .collect()
}

fn redis_cli(args: &[&str]) -> (bool, String) {
    let out = Command::new(tool("redis-cli"))
        .args(args)
        .output()
        .expect("run redis-cli");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `redis-cli --cluster create` over `nodes`, then waits until every node says
/// the cluster is ok.
fn create(nodes: &[TestServer]) {
    let mut args = vec!["--cluster".to_string(), "create".to_string()];
    args.extend(nodes.iter().map(|n| n.addr()));
    args.push("--cluster-yes".into());
    let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let (ok, out) = redis_cli(&args);
    assert!(ok, "cluster create failed:\n{out}");
    assert!(
        out.contains("[OK] All nodes agree about slots configuration."),
        "{out}"
    );
    assert!(out.contains("[OK] All 16384 slots covered."), "{out}");
    for n in nodes {
        wait_for(&format!("node {} to see the cluster ok", n.port), || {
            cluster_info(n, "cluster_state") == "ok"
                && cluster_info(n, "cluster_known_nodes") == nodes.len().to_string()
        });
    }
}

fn cluster_info(n: &TestServer, field: &str) -> String {
    let info = n.cli_out(&["cluster", "info"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .trim()
        .to_string()
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn myid(n: &TestServer) -> String {
    n.cli_out(&["cluster", "myid"])
}

/// The node of `nodes` that owns `key`'s slot, by asking each.
fn owner_of<'a>(nodes: &'a [TestServer], key: &str) -> &'a TestServer {
    let slot: u16 = nodes[0]
        .cli_out(&["cluster", "keyslot", key])
        .parse()
        .unwrap();
    nodes
        .iter()
        .find(|n| owns(n, slot))
        .expect("some node owns every slot")
}

/// The slots `n` says it owns (its own line of CLUSTER NODES; moving-slot
/// markers left out).
fn my_slots(n: &TestServer) -> Vec<u16> {
    let id = myid(n);
    let nodes = n.cli_out(&["cluster", "nodes"]);
    let mine = nodes.lines().find(|l| l.starts_with(&id)).unwrap();
    mine.split(' ')
        .skip(8)
        .filter(|r| !r.starts_with('['))
        .flat_map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            a.parse::<u16>().unwrap()..=b.parse::<u16>().unwrap()
        })
        .collect()
}

fn owns(n: &TestServer, slot: u16) -> bool {
    my_slots(n).contains(&slot)
}

/// `redis-cli --cluster check` through `n`: every node agrees on the slot map.
fn check_agrees(n: &TestServer) -> String {
    let (ok, out) = redis_cli(&["--cluster", "check", &n.addr()]);
    assert!(
        ok && out.contains("[OK] All nodes agree about slots configuration."),
        "{out}"
    );
    out
}

#[test]
fn a_cluster_created_by_redis_cli_serves_every_family_through_a_cluster_client() {
    let nodes = nodes(3);
    create(&nodes);
    let (ok, out) = redis_cli(&["--cluster", "check", &nodes[1].addr()]);
    assert!(ok && out.contains("[OK] All 16384 slots covered."), "{out}");
    assert!(nodes[0]
        .cli_out(&["info", "cluster"])
        .contains("cluster_enabled:1"));

    // Every node tells the same slot map.
    let maps: Vec<String> = nodes
        .iter()
        .map(|n| n.cli_out(&["cluster", "slots"]))
        .collect();
    assert!(maps.iter().all(|m| *m == maps[0]), "{maps:?}");

    let urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();
    let client = redis::cluster::ClusterClient::new(urls).unwrap();
    let mut con = client.get_connection().unwrap();
    for i in 0..200 {
        let key = format!("user:{i}");
        let () = redis::cmd("SET").arg(&key).arg(i).query(&mut con).unwrap();
        let set = format!("{{user:{i}}}:following");
        let added: i64 = redis::cmd("SADD")
            .arg(&set)
            .arg(i)
            .arg(i + 1)
            .query(&mut con)
            .unwrap();
        assert_eq!(added, 2);
        let added: i64 = redis::cmd("IDSET.ADD")
            .arg(&set)
            .arg(i + 2)
            .query(&mut con)
            .unwrap();
        assert_eq!(added, 1);
    }
    for i in (0..200).step_by(7) {
        let v: i64 = redis::cmd("GET")
            .arg(format!("user:{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(v, i);
        let set = format!("{{user:{i}}}:following");
        let hits: Vec<i64> = redis::cmd("IDSET.MEXISTS")
            .arg(&set)
            .arg(i)
            .arg(i + 2)
            .arg(i + 3)
            .query(&mut con)
            .unwrap();
        assert_eq!(hits, vec![1, 1, 0]);
        // A key and a set of one user share a slot, so a transaction over both
        // runs (on the owner: the crate's cluster client has no MULTI).
        let key = format!("{{user:{i}}}:n");
        let mut owner = owner_of(&nodes, &key).conn();
        let (n, card): (i64, i64) = redis::pipe()
            .atomic()
            .cmd("INCR")
            .arg(&key)
            .cmd("SCARD")
            .arg(&set)
            .query(&mut owner)
            .unwrap();
        assert_eq!((n, card), (1, 3));
    }

    // Each key lives on the node that owns its slot, and only there.
    let owner = owner_of(&nodes, "user:42");
    let mut direct = owner.conn();
    let v: i64 = redis::cmd("GET").arg("user:42").query(&mut direct).unwrap();
    assert_eq!(v, 42);
    let total: i64 = nodes
        .iter()
        .map(|n| n.cli_out(&["dbsize"]).parse::<i64>().unwrap())
        .sum();
    assert_eq!(total, 200 + 200 + 200 / 7 + 1);
    let slot = nodes[0].cli_out(&["cluster", "keyslot", "user:42"]);
    assert!(
        owner
            .cli_out(&["cluster", "countkeysinslot", &slot])
            .parse::<i64>()
            .unwrap()
            >= 1
    );
    let keys = owner.cli_out(&["cluster", "getkeysinslot", &slot, "10"]);
    assert!(keys.lines().any(|k| k == "user:42"), "{keys}");

    // The others redirect, as Redis words it; keys of two slots are refused.
    let other = nodes.iter().find(|n| n.port != owner.port).unwrap();
    let mut raw = Conn::new(other.port);
    assert_eq!(
        raw.reply(&["GET", "user:42"]),
        format!("-MOVED {slot} {}\r\n", owner.addr())
    );
    assert_eq!(
        raw.reply(&["MSET", "a", "1", "b", "2"]),
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    assert_eq!(
        raw.reply(&["SINTER", "a", "b"]),
        "-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    // Commands without keys run anywhere.
    assert_eq!(raw.reply(&["PING"]), "+PONG\r\n");
}

#[test]
fn a_slot_moves_with_ask_then_moved_and_the_new_owner_wins_everywhere() {
    let nodes = nodes(3);
    create(&nodes);
    let key = "{moving}:a";
    let slot = nodes[0].cli_out(&["cluster", "keyslot", key]);
    let source = owner_of(&nodes, key);
    let target = nodes.iter().find(|n| n.port != source.port).unwrap();
    let (sid, tid) = (myid(source), myid(target));
    let mut src = Conn::new(source.port);
    let mut dst = Conn::new(target.port);
    assert_eq!(src.reply(&["SET", key, "here"]), "+OK\r\n");

    assert_eq!(
        dst.reply(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &sid]),
        "+OK\r\n"
    );
    assert_eq!(
        src.reply(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &tid]),
        "+OK\r\n"
    );
    let nodes_text = source.cli_out(&["cluster", "nodes"]);
    assert!(
        nodes_text.contains(&format!("[{slot}->-{tid}]")),
        "{nodes_text}"
    );

    // While it moves: a key still here is served here, one already gone is
    // asked for at the target, a mix is TRYAGAIN.
    assert_eq!(src.reply(&["GET", key]), "$4\r\nhere\r\n");
    // So is a script's, which runs under the locks the move's check took.
    assert_eq!(
        src.reply(&["EVAL", "return redis.call('get', KEYS[1])", "1", key]),
        "$4\r\nhere\r\n"
    );
    let ask = format!("-ASK {slot} {}\r\n", target.addr());
    assert_eq!(src.reply(&["GET", "{moving}:b"]), ask);
    assert_eq!(
        src.reply(&["MGET", key, "{moving}:b"]),
        "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
    );
    // The target serves the slot only after ASKING, and for that one command.
    assert_eq!(
        dst.reply(&["SET", "{moving}:b", "new"]),
        format!("-MOVED {slot} {}\r\n", source.addr())
    );
    assert_eq!(dst.reply(&["ASKING"]), "+OK\r\n");
    assert_eq!(dst.reply(&["SET", "{moving}:b", "new"]), "+OK\r\n");
    assert!(dst.reply(&["GET", "{moving}:b"]).starts_with("-MOVED"));
    // The key moves (by hand here; MIGRATE does this for redis-cli's reshard).
    assert_eq!(src.reply(&["DEL", key]), ":1\r\n");
    assert_eq!(dst.reply(&["ASKING"]), "+OK\r\n");
    assert_eq!(dst.reply(&["SET", key, "here"]), "+OK\r\n");

    // SETSLOT NODE ends the move: refused while the source still holds keys.
    let epoch_before: u64 = cluster_info(target, "cluster_my_epoch").parse().unwrap();
    assert_eq!(
        dst.reply(&["CLUSTER", "SETSLOT", &slot, "NODE", &tid]),
        "+OK\r\n"
    );
    let epoch_after: u64 = cluster_info(target, "cluster_my_epoch").parse().unwrap();
    assert!(epoch_after > epoch_before, "the importer takes a new epoch");
    assert_eq!(
        src.reply(&["CLUSTER", "SETSLOT", &slot, "NODE", &tid]),
        "+OK\r\n"
    );
    for n in &nodes {
        wait_for("every node to learn the new owner", || {
            owns(target, slot.parse().unwrap()) && {
                let mut c = Conn::new(n.port);
                let r = c.reply(&["GET", key]);
                r == "$4\r\nhere\r\n" || r == format!("-MOVED {slot} {}\r\n", target.addr())
            }
        });
    }
    assert_eq!(
        src.reply(&["GET", key]),
        format!("-MOVED {slot} {}\r\n", target.addr())
    );
    check_agrees(&nodes[0]);
}

#[test]
fn cluster_commands_answer_as_redis_does() {
    let dir = TempDir::new("redis-cluster");
    let redis = RedisServer::start_with(&["--cluster-enabled", "yes", "--dir", dir.path()]);
    let ours = TestServer::start_with(&["--cluster-enabled", "yes"]);
    let mut theirs = Conn::new(redis.port);
    let mut mine = Conn::new(ours.port);
    let unknown = "0123456789012345678901234567890123456789";
    let requests: &[&[&str]] = &[
        &["CLUSTER", "KEYSLOT", "{user1000}.following"],
        &["CLUSTER", "COUNTKEYSINSLOT", "x"],
        &["CLUSTER", "COUNTKEYSINSLOT", "16384"],
        &["CLUSTER", "COUNTKEYSINSLOT", "7"],
        &["CLUSTER", "GETKEYSINSLOT", "1", "-1"],
        &["CLUSTER", "GETKEYSINSLOT", "1", "5"],
        &["CLUSTER", "ADDSLOTS", "16384"],
        &["CLUSTER", "ADDSLOTS", "x"],
        &["CLUSTER", "ADDSLOTS", "1", "1"],
        &["CLUSTER", "ADDSLOTS", "1", "2"],
        &["CLUSTER", "ADDSLOTS", "2"],
        &["CLUSTER", "DELSLOTS", "3"],
        &["CLUSTER", "DELSLOTS", "2"],
        &["CLUSTER", "ADDSLOTSRANGE", "5", "3"],
        &["CLUSTER", "ADDSLOTSRANGE", "5", "9", "8", "10"],
        &["CLUSTER", "ADDSLOTSRANGE", "5", "9", "10"],
        &["CLUSTER", "ADDSLOTSRANGE", "5", "9"],
        &["CLUSTER", "DELSLOTSRANGE", "5", "6"],
        &["CLUSTER", "SETSLOT", "1", "FOO"],
        &["CLUSTER", "SETSLOT", "1", "NODE"],
        &["CLUSTER", "SETSLOT", "1", "NODE", unknown],
        &["CLUSTER", "SETSLOT", "100", "MIGRATING", unknown],
        &["CLUSTER", "SETSLOT", "1", "MIGRATING", unknown],
        &["CLUSTER", "SETSLOT", "1", "IMPORTING", unknown],
        &["CLUSTER", "SETSLOT", "100", "IMPORTING", unknown],
        &["CLUSTER", "SETSLOT", "1", "STABLE"],
        &["CLUSTER", "SETSLOT", "99999", "STABLE"],
        &["CLUSTER", "MEET", "1.2.3", "5"],
        &["CLUSTER", "MEET", "127.0.0.1", "70000"],
        &["CLUSTER", "FORGET", unknown],
        &["CLUSTER", "COUNT-FAILURE-REPORTS", unknown],
        &["CLUSTER", "RESET", "FOO"],
        &["CLUSTER", "SET-CONFIG-EPOCH", "-1"],
        &["CLUSTER", "SET-CONFIG-EPOCH", "x"],
        &["CLUSTER", "SET-CONFIG-EPOCH", "5"],
        &["CLUSTER", "SET-CONFIG-EPOCH", "6"],
        &["CLUSTER", "BUMPEPOCH"],
        &["CLUSTER", "NOSUCH"],
        &["GET", "foo"],
        &["SET", "{a}1", "x"],
        &["MSET", "a", "1", "b", "2"],
        &["ASKING"],
        &["READONLY"],
        &["READWRITE"],
        &["MULTI"],
        &["SET", "a", "1"],
        &["EXEC"],
        &["EVAL", "#!lua flags=no-cluster\nreturn 1", "0"],
        &["CLUSTER", "FLUSHSLOTS"],
        &["CLUSTER", "COUNTKEYSINSLOT", "7"],
    ];
    same_answers(
        &mut mine,
        &mut theirs,
        requests,
        "cluster commands",
        |c, req| c.reply(req),
    );

    // A standalone server refuses them all the same way.
    let plain = TestServer::start();
    let redis_plain = RedisServer::start();
    same_answers(
        &mut Conn::new(plain.port),
        &mut Conn::new(redis_plain.port),
        &[
            &["CLUSTER", "INFO"],
            &["ASKING"],
            &["READONLY"],
            &["CLUSTER", "KEYSLOT", "a"],
        ],
        "standalone",
        |c, req| c.reply(req),
    );
}

#[test]
fn the_config_survives_a_restart_and_a_damaged_one_stops_the_node() {
    let nodes = nodes(3);
    create(&nodes);
    // Each node keeps its config in its own dir as nodes.conf: read it back by
    // restarting one node on the same dir and port.
    let victim = &nodes[2];
    let id = myid(victim);
    let conf_path = {
        let log = victim.log();
        let line = log
            .lines()
            .find(|l| l.contains("cluster mode"))
            .expect("cluster mode logged")
            .to_string();
        line.split("file=")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let conf = std::fs::read_to_string(&conf_path).unwrap();
    assert!(
        conf.contains(&format!("{id} ")) && conf.contains("myself,master"),
        "{conf}"
    );
    assert!(
        conf.lines()
            .last()
            .unwrap()
            .starts_with("vars currentEpoch"),
        "{conf}"
    );

    let copy = TempDir::new("cluster-conf");
    std::fs::write(copy.file().with_file_name("nodes.conf"), &conf).unwrap();
    let restarted_dir = copy.file().parent().unwrap().to_string_lossy().to_string();
    let again = TestServer::start_with(&["--cluster-enabled", "yes", "--dir", &restarted_dir]);
    assert_eq!(myid(&again), id, "the node keeps its name");
    let mine = again.cli_out(&["cluster", "nodes"]);
    let theirs = victim.cli_out(&["cluster", "nodes"]);
    let slots = |t: &str| {
        t.lines()
            .find(|l| l.contains("myself"))
            .unwrap()
            .split(' ')
            .skip(8)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(slots(&mine), slots(&theirs));
    assert_eq!(mine.lines().count(), 3, "{mine}");
    drop(again);

    // A damaged file is refused: the node does not start with a made-up map.
    let broken = TempDir::new("cluster-broken");
    let damaged = conf.replacen(" connected ", " connected 0-99999 ", 1);
    std::fs::write(broken.file().with_file_name("nodes.conf"), damaged).unwrap();
    let out = Command::new(harness::server_bin())
        .args(["--port", "0", "--cluster-enabled", "yes", "--dir"])
        .arg(broken.file().parent().unwrap())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("corrupted cluster config file") && err.contains("line 1"),
        "{err}"
    );
}

#[test]
fn a_hostile_bus_peer_cannot_crash_or_grow_a_node() {
    let node = TestServer::start_with(&["--cluster-enabled", "yes"]);
    let cport: u16 = {
        let nodes = node.cli_out(&["cluster", "nodes"]);
        let addr = nodes.split(' ').nth(1).unwrap().to_string();
        addr.split('@').nth(1).unwrap().parse().unwrap()
    };
    // The node serves every slot and holds a key the hostile peer must not touch.
    assert_eq!(
        node.cli_out(&["cluster", "addslotsrange", "0", "16383"]),
        "OK"
    );
    assert_eq!(node.cli_out(&["set", "{x}kept", "1"]), "OK");
    let send = |bytes: &[u8]| -> Vec<u8> {
        let mut s = TcpStream::connect(("127.0.0.1", cport)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(bytes);
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        out
    };
    // Not the bus protocol; an endless length; a checksum that does not match;
    // a frame whose body lies about its gossip count.
    assert!(send(b"GET / HTTP/1.1\r\n\r\n").is_empty());
    let mut huge = b"RCB1".to_vec();
    huge.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(send(&huge).is_empty());
    let mut bad_crc = b"RCB1".to_vec();
    bad_crc.extend_from_slice(&4u32.to_le_bytes());
    bad_crc.extend_from_slice(b"\x01abc\0\0\0\0");
    assert!(send(&bad_crc).is_empty());
    // A MEET from an unknown node that gossips a thousand others: the node adds
    // them up to its bound and stays up.
    let mut body = vec![3u8];
    body.extend_from_slice(&[b'f'; 40]);
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&1u16.to_le_bytes());
    body.extend_from_slice(&0u64.to_le_bytes());
    body.extend_from_slice(&0u64.to_le_bytes());
    body.push(0);
    body.extend_from_slice(&[0u8; 2048]);
    body.extend_from_slice(&1000u16.to_le_bytes());
    for i in 0..1000u32 {
        body.extend_from_slice(format!("{i:040x}").as_bytes());
        let ip = "127.0.0.2";
        body.push(ip.len() as u8);
        body.extend_from_slice(ip.as_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
    }
    let mut frame = b"RCB1".to_vec();
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    frame.extend_from_slice(&crc32(&body).to_le_bytes());
    {
        let mut s = TcpStream::connect(("127.0.0.1", cport)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&frame).unwrap();
        let mut head = [0u8; 4];
        s.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"RCB1", "a MEET is answered with a PONG");
    }
    wait_for("gossip to be taken", || {
        cluster_info(&node, "cluster_known_nodes")
            .parse::<usize>()
            .unwrap()
            > 2
    });
    let known: usize = cluster_info(&node, "cluster_known_nodes").parse().unwrap();
    assert!(known <= 1000, "{known} nodes");
    assert_eq!(node.cli_out(&["ping"]), "PONG");
    assert_eq!(node.cli_out(&["get", "{x}kept"]), "1");
    assert_eq!(my_slots(&node).len(), 16384, "no slot was taken");
    assert_eq!(node.cli_out(&["cluster", "myid"]).len(), 40);
}

/// CRC-32 (IEEE), as the bus frames carry it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// redis-py's RedisCluster, as Python users run it (RESP2 and RESP3): strings,
/// sets and IDSET commands routed by slot, a cross-slot command refused, MOVED
/// followed after a slot moves (tests/python/cluster.py).
#[test]
fn redis_py_cluster_client_routes_and_follows_moves() {
    let nodes = nodes(3);
    create(&nodes);
    harness::python_checks("cluster.py", nodes[0].port);
}

/// `redis-cli --cluster add-node`, `rebalance` (onto the new node and off it
/// again, keys moving with MIGRATE) and `del-node`.
#[test]
fn redis_cli_adds_rebalances_and_deletes_a_node() {
    let mut all = nodes(4);
    let extra = all.pop().unwrap();
    create(&all);
    let (ok, out) = redis_cli(&["--cluster", "add-node", &extra.addr(), &all[0].addr()]);
    assert!(
        ok && out.contains("[OK] New node added correctly."),
        "{out}"
    );
    for n in all.iter().chain([&extra]) {
        wait_for("every node to know four", || {
            cluster_info(n, "cluster_known_nodes") == "4"
        });
    }
    // Knowing a node (gossip) comes before knowing its slots (its own ping).
    wait_for("the new node to agree on the slot map", || {
        redis_cli(&["--cluster", "check", &extra.addr()]).0
    });
    let out = check_agrees(&extra);
    assert!(out.contains("[OK] All 16384 slots covered."), "{out}");
    assert!(out.contains("0 slots"), "the new node is empty: {out}");

    // Rebalance gives the new node its share (a small weight keeps the test
    // short: some 260 slots, moved with MIGRATE), then takes it all back.
    let id = myid(&extra);
    let (a, b, c) = (myid(&all[0]), myid(&all[1]), myid(&all[2]));
    let weights = |w: &str| {
        vec![
            format!("{a}=1"),
            format!("{b}=1"),
            format!("{c}=1"),
            format!("{id}={w}"),
        ]
    };
    let urls: Vec<String> = all.iter().map(|n| n.url()).collect();
    let client = redis::cluster::ClusterClient::new(urls).unwrap();
    let mut con = client.get_connection().unwrap();
    for i in 0..300 {
        let () = redis::cmd("SET")
            .arg(format!("rebalanced:{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    let mut args: Vec<String> = [
        "--cluster",
        "rebalance",
        &all[0].addr(),
        "--cluster-use-empty-masters",
        "--cluster-weight",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(weights("0.05"));
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let (ok, out) = redis_cli(&refs);
    assert!(ok, "rebalance failed:\n{out}");
    let (ok, out) = redis_cli(&["--cluster", "check", &extra.addr()]);
    assert!(ok && out.contains("[OK] All 16384 slots covered."), "{out}");
    assert!(
        !out.contains("0 slots |") && !out.contains("[WARNING]"),
        "the new node took slots: {out}"
    );
    let mut args: Vec<String> = ["--cluster", "rebalance", &all[0].addr(), "--cluster-weight"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(weights("0"));
    let refs: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    let (ok, out) = redis_cli(&refs);
    assert!(ok, "rebalance back failed:\n{out}");
    wait_for("the new node to be emptied", || {
        extra.cli_out(&["dbsize"]) == "0"
    });
    // Every key moved there and back is still there, once.
    let mut con = client.get_connection().unwrap();
    for i in 0..300 {
        let v: i64 = redis::cmd("GET")
            .arg(format!("rebalanced:{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(v, i);
    }
    let total: usize = all
        .iter()
        .map(|n| n.cli_out(&["dbsize"]).parse::<usize>().unwrap())
        .sum();
    assert_eq!(total, 300);

    let (ok, out) = redis_cli(&["--cluster", "del-node", &all[1].addr(), &id]);
    assert!(
        ok && out.contains(">>> Sending CLUSTER FORGET messages to the cluster..."),
        "{out}"
    );
    for n in &all {
        wait_for("the others to forget it", || {
            cluster_info(n, "cluster_known_nodes") == "3"
        });
        assert!(!n.cli_out(&["cluster", "nodes"]).contains(&id));
    }
    // The forgotten node is reset: it knows only itself, and gossip from the
    // others does not bring it back.
    wait_for("the deleted node to be alone", || {
        cluster_info(&extra, "cluster_known_nodes") == "1"
    });
    std::thread::sleep(Duration::from_millis(2500));
    for n in &all {
        assert_eq!(cluster_info(n, "cluster_known_nodes"), "3");
    }
    check_agrees(&all[0]);
}

#[test]
fn publish_reaches_subscribers_on_every_node() {
    let nodes = nodes(3);
    create(&nodes);
    let mut subscribers: Vec<Conn> = nodes.iter().map(|n| Conn::new(n.port)).collect();
    for s in &mut subscribers {
        assert!(s.reply(&["SUBSCRIBE", "news"]).contains("subscribe"));
    }
    // The links come up within a second of the cluster forming.
    wait_for("every node's links to be up", || {
        nodes.iter().all(|n| {
            let links = n.cli_out(&["cluster", "links"]);
            links.matches("direction").count() == 2
        })
    });
    let mut publisher = Conn::new(nodes[1].port);
    // The count is this node's subscribers, as in Redis.
    assert_eq!(publisher.reply(&["PUBLISH", "news", "hello"]), ":1\r\n");
    for s in &mut subscribers {
        assert_eq!(
            s.frame(),
            relcache_protocol::resp::Frame::Array(vec![
                relcache_protocol::resp::Frame::bulk("message"),
                relcache_protocol::resp::Frame::bulk("news"),
                relcache_protocol::resp::Frame::bulk("hello"),
            ])
        );
    }
    let sent: u64 = cluster_info(&nodes[1], "cluster_stats_messages_publish_sent")
        .parse()
        .unwrap();
    assert_eq!(sent, 2);
}

/// `redis-cli --cluster reshard` (MIGRATE under the hood) moves 600 slots while
/// a client writes and reads through the `redis` crate's cluster client: every
/// acknowledged write is there afterwards, and no read ever answered a value
/// other than the last one written.
#[test]
fn a_reshard_under_load_loses_no_acknowledged_write() {
    let nodes = nodes(3);
    create(&nodes);
    let urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();
    let client = redis::cluster::ClusterClient::builder(urls)
        .retries(32)
        .build()
        .unwrap();
    const KEYS: usize = 1_500;
    {
        let mut con = client.get_connection().unwrap();
        for i in 0..KEYS {
            let () = redis::cmd("SET")
                .arg(format!("k:{i}"))
                .arg(0)
                .query(&mut con)
                .unwrap();
            let _: i64 = redis::cmd("SADD")
                .arg(format!("{{s:{i}}}"))
                .arg(i)
                .query(&mut con)
                .unwrap();
        }
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let client = client.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut con = client.get_connection().unwrap();
            let mut last = vec![0i64; KEYS];
            let mut round = 0i64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                for i in (0..KEYS).step_by(7) {
                    let key = format!("k:{i}");
                    let () = redis::cmd("SET")
                        .arg(&key)
                        .arg(round)
                        .query(&mut con)
                        .unwrap();
                    last[i] = round;
                    let got: i64 = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
                    assert_eq!(got, round, "a read after an acknowledged write of {key}");
                    let added: i64 = redis::cmd("IDSET.ADD")
                        .arg(format!("{{s:{i}}}"))
                        .arg(1_000_000 + round)
                        .query(&mut con)
                        .unwrap();
                    assert_eq!(added, 1);
                }
            }
            (last, round)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let from = myid(&nodes[0]);
    let to = myid(&nodes[2]);
    let (ok, out) = redis_cli(&[
        "--cluster",
        "reshard",
        &nodes[1].addr(),
        "--cluster-from",
        &from,
        "--cluster-to",
        &to,
        "--cluster-slots",
        "600",
        "--cluster-pipeline",
        "20",
        "--cluster-yes",
    ]);
    assert!(ok, "reshard failed:\n{out}");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (last, rounds) = writer.join().expect("the writer saw no wrong answer");
    assert!(
        rounds >= 2,
        "the writer ran through the reshard ({rounds} rounds)"
    );

    let out = check_agrees(&nodes[0]);
    assert!(!out.contains("[WARNING]"), "no slot left open: {out}");
    assert_eq!(my_slots(&nodes[0]).len(), 5461 - 600);
    assert_eq!(my_slots(&nodes[2]).len(), 5461 + 600);

    let mut con = client.get_connection().unwrap();
    for (i, want) in last.iter().enumerate() {
        let got: i64 = redis::cmd("GET")
            .arg(format!("k:{i}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(got, *want, "k:{i}");
        let card: i64 = redis::cmd("SCARD")
            .arg(format!("{{s:{i}}}"))
            .query(&mut con)
            .unwrap();
        let want_card = if i % 7 == 0 { 1 + rounds } else { 1 };
        assert!(
            card == want_card || card == want_card - 1,
            "{{s:{i}}} has {card}"
        );
    }
    let total: usize = nodes
        .iter()
        .map(|n| n.cli_out(&["dbsize"]).parse::<usize>().unwrap())
        .sum();
    assert_eq!(total, 2 * KEYS, "every key on exactly one node");
}

/// A lease granted before its slot starts to move is revoked: the writes its
/// fill might have missed go to the other node meanwhile, so even if the move is
/// called off, that fill must not be stored.
#[test]
fn a_slot_that_starts_moving_revokes_its_leases() {
    let nodes = nodes(3);
    create(&nodes);
    let key = "{leased}:following";
    let slot = nodes[0].cli_out(&["cluster", "keyslot", key]);
    let source = owner_of(&nodes, key);
    let target = nodes.iter().find(|n| n.port != source.port).unwrap();
    let mut src = Conn::new(source.port);
    let token = src.reply(&["IDSET.LEASE", key]);
    let token = token.trim_start_matches(':').trim_end().to_string();
    assert!(token.parse::<u64>().unwrap() > 0, "{token}");
    assert_eq!(
        src.reply(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &myid(target)]),
        "+OK\r\n"
    );
    // While the slot moves the fill is asked for at the target; once the move is
    // called off, the old lease is gone: the fill is refused (nil), nothing stored.
    let fill = ["IDSET.LOAD", key, "LEASE", &token, "IDS", "1", "2"];
    assert!(src.reply(&fill).starts_with("-ASK "));
    assert_eq!(
        src.reply(&["CLUSTER", "SETSLOT", &slot, "STABLE"]),
        "+OK\r\n"
    );
    assert_eq!(src.reply(&fill), "$-1\r\n");
    assert_eq!(src.reply(&["CLUSTER", "COUNTKEYSINSLOT", &slot]), ":0\r\n");
}
