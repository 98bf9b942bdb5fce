//! The real tools against the real binary: redis-cli (arguments, RESP3, `-x`,
//! `--pipe`), inline commands over a raw socket, redis-benchmark, and the `redis`
//! crate (sync, async, pipelines, MULTI/EXEC, RESP3, a multiplexed connection shared
//! by many tasks). These are the clients the design promises work unchanged.

mod harness;

use std::io::Write;

use harness::{read_n, roundtrip, TestServer};
use redis::Value;

// ---------------------------------------------------------------- redis-cli

#[test]
fn cli_commands_as_arguments() {
    let s = TestServer::start();
    // Without a terminal redis-cli prints replies raw: no "(integer)", no quotes.
    assert_eq!(s.cli_out(&["SET", "k", "v"]), "OK");
    assert_eq!(s.cli_out(&["GET", "k"]), "v");
    assert_eq!(s.cli_out(&["INCR", "n"]), "1");
    assert_eq!(s.cli_out(&["INCR", "n"]), "2");
    assert_eq!(s.cli_out(&["INCRBY", "n", "40"]), "42");
    assert_eq!(s.cli_out(&["APPEND", "k", "alue"]), "5");
    assert_eq!(s.cli_out(&["GET", "k"]), "value");
    assert_eq!(s.cli_out(&["EXISTS", "k", "n", "nope"]), "2");
    assert_eq!(s.cli_out(&["DEL", "k", "n", "nope"]), "2");
    assert_eq!(s.cli_out(&["EXISTS", "k"]), "0");
    assert_eq!(s.cli_out(&["DBSIZE"]), "0");
    // --no-raw gives the terminal format.
    assert_eq!(s.cli_out(&["--no-raw", "GET", "k"]), "(nil)");
    assert_eq!(s.cli_out(&["--no-raw", "INCR", "n"]), "(integer) 1");
    assert_eq!(s.cli_out(&["--no-raw", "SET", "k", "v"]), "OK");
    assert_eq!(
        s.cli_out(&["--no-raw", "MGET", "k", "missing"]),
        "1) \"v\"\n2) (nil)"
    );
    // An error reply is printed, and redis-cli still exits 0 as with Redis.
    assert_eq!(
        s.cli_out(&["--no-raw", "INCR", "k"]),
        "(error) ERR value is not an integer or out of range"
    );
    // A value with spaces and quotes passes through as one argument.
    assert_eq!(s.cli_out(&["SET", "sp", "hello \"quoted\" world"]), "OK");
    assert_eq!(s.cli_out(&["GET", "sp"]), "hello \"quoted\" world");
}

#[test]
fn cli_resp3() {
    let s = TestServer::start();
    let hello = s.cli_out(&["-3", "--no-raw", "HELLO", "3"]);
    assert!(
        hello.contains("\"proto\" => (integer) 3"),
        "HELLO 3 via redis-cli -3:\n{hello}"
    );
    assert!(hello.contains("\"server\" => "), "{hello}");
    assert!(hello.contains("\"id\" => (integer) "), "{hello}");
    // A missing key is (nil) in both protocols (RESP3 sends `_`, RESP2 `$-1`).
    assert_eq!(s.cli_out(&["-3", "--no-raw", "GET", "missing"]), "(nil)");
    assert_eq!(s.cli_out(&["-2", "--no-raw", "GET", "missing"]), "(nil)");
    assert_eq!(s.cli_out(&["-3", "SET", "a", "b"]), "OK");
    assert_eq!(s.cli_out(&["-3", "GET", "a"]), "b");
    assert_eq!(s.cli_out(&["-3", "--no-raw", "INCR", "n"]), "(integer) 1");
    // HELLO 2 from a RESP2 session is a flat array, not a map.
    let hello2 = s.cli_out(&["--no-raw", "HELLO", "2"]);
    assert!(
        hello2.starts_with(" 1) \"server\""),
        "HELLO 2 via redis-cli:\n{hello2}"
    );
    assert!(hello2.contains("\"proto\"\n 6) (integer) 2"), "{hello2}");
}

/// Every byte value, plus the sequences a text protocol would trip on.
fn awkward_bytes() -> Vec<u8> {
    let mut v: Vec<u8> = (0..=255u8).collect();
    v.extend_from_slice(b"\0\0\r\n\r\n$3\r\n*1\r\n\"'\\ \n\r\0");
    v.extend((0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    v
}

#[test]
fn cli_x_stdin_is_binary_safe() {
    let s = TestServer::start();
    let data = awkward_bytes();
    let out = s.cli_stdin(&["-x", "SET", "bin"], data.clone());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), "OK");
    // Read back through the redis crate: exact bytes.
    let mut con = s.conn();
    let got: Vec<u8> = redis::cmd("GET").arg("bin").query(&mut con).unwrap();
    assert_eq!(got.len(), data.len());
    assert!(got == data, "value differs from what redis-cli -x sent");
    let len: usize = redis::cmd("STRLEN").arg("bin").query(&mut con).unwrap();
    assert_eq!(len, data.len());
    // And through redis-cli --raw, which adds one newline after the value.
    let raw = s.cli(&["--raw", "GET", "bin"]);
    assert!(raw.status.success());
    let mut expected = data.clone();
    expected.push(b'\n');
    assert!(
        raw.stdout == expected,
        "redis-cli --raw GET returned {} bytes, expected {}",
        raw.stdout.len(),
        expected.len()
    );
    // A value with a NUL in the middle through the redis crate, read with -x's twin.
    redis::cmd("SET")
        .arg("nul")
        .arg(&b"a\0b\r\nc"[..])
        .query::<()>(&mut con)
        .unwrap();
    let raw = s.cli(&["--raw", "GET", "nul"]);
    assert_eq!(raw.stdout, b"a\0b\r\nc\n");
}

#[test]
fn cli_pipe_mass_insertion() {
    let s = TestServer::start();
    const N: usize = 100_000;
    let mut input = Vec::with_capacity(N * 48);
    for i in 0..N {
        let key = format!("key:{i}");
        let val = format!("value:{i}");
        write!(
            input,
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{val}\r\n",
            key.len(),
            val.len()
        )
        .unwrap();
    }
    let out = s.cli_stdin(&["--pipe"], input);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "redis-cli --pipe failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("errors: 0, replies: 100000"),
        "redis-cli --pipe said:\n{stdout}"
    );
    assert_eq!(s.cli_out(&["DBSIZE"]), "100000");
    assert_eq!(s.cli_out(&["GET", "key:0"]), "value:0");
    assert_eq!(s.cli_out(&["GET", "key:99999"]), "value:99999");
}

#[test]
fn cli_pipe_counts_errors() {
    let s = TestServer::start();
    // Two good commands and one that fails: --pipe reports it and exits non-zero.
    let input = b"*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$4\r\nINCR\r\n$1\r\nb\r\n*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$1\r\nx\r\n*2\r\n$4\r\nINCR\r\n$1\r\nb\r\n".to_vec();
    let out = s.cli_stdin(&["--pipe"], input);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("errors: 1, replies: 4"),
        "redis-cli --pipe said:\n{stdout}"
    );
    assert!(!out.status.success());
}

// ---------------------------------------------------------------- inline commands

#[test]
fn inline_commands_over_raw_socket() {
    let s = TestServer::start();
    let mut c = s.raw();
    roundtrip(&mut c, b"PING\r\n", b"+PONG\r\n");
    roundtrip(&mut c, b"ping hello\r\n", b"$5\r\nhello\r\n");
    roundtrip(&mut c, b"SET a \"hello world\"\r\n", b"+OK\r\n");
    roundtrip(&mut c, b"GET a\r\n", b"$11\r\nhello world\r\n");
    // A bare \n ends an inline command too (telnet-style clients), and extra spaces
    // between arguments are ignored.
    roundtrip(&mut c, b"GET   a\n", b"$11\r\nhello world\r\n");
    // Escapes inside double quotes; single quotes are literal except \'.
    roundtrip(&mut c, b"SET b \"x\\x41\\n\\x00y\"\r\n", b"+OK\r\n");
    roundtrip(&mut c, b"GET b\r\n", b"$5\r\nxA\n\0y\r\n");
    roundtrip(&mut c, b"SET c 'it\\'s \\n'\r\n", b"+OK\r\n");
    roundtrip(&mut c, b"GET c\r\n", b"$7\r\nit's \\n\r\n");
    // An empty line is skipped, not an error.
    roundtrip(&mut c, b"\r\n\r\nPING\r\n", b"+PONG\r\n");
    // Pipelined inline commands are answered in order.
    roundtrip(
        &mut c,
        b"INCR n\r\nINCR n\r\nGET n\r\nDEL n a\r\n",
        b":1\r\n:2\r\n$1\r\n2\r\n:2\r\n",
    );
    // Inline and multibulk may be mixed on one connection.
    roundtrip(
        &mut c,
        b"*2\r\n$3\r\nGET\r\n$1\r\nb\r\nGET c\r\n",
        b"$5\r\nxA\n\0y\r\n$7\r\nit's \\n\r\n",
    );
    // Errors keep the connection open.
    roundtrip(
        &mut c,
        b"NOSUCH x y\r\n",
        b"-ERR unknown command 'NOSUCH', with args beginning with: 'x' 'y' \r\n",
    );
    roundtrip(&mut c, b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn inline_command_split_across_writes() {
    let s = TestServer::start();
    let mut c = s.raw();
    c.set_nodelay(true).unwrap();
    for chunk in [
        &b"SE"[..],
        b"T k",
        b"ey \"a b",
        b"\"\r",
        b"\nGE",
        b"T key\r\n",
    ] {
        c.write_all(chunk).unwrap();
        c.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(read_n(&mut c, 5 + 9), b"+OK\r\n$3\r\na b\r\n");
}

// ---------------------------------------------------------------- redis-benchmark

/// Runs redis-benchmark, asserts it succeeded without an error reply, and returns
/// its stdout.
fn benchmark(s: &TestServer, args: &[&str]) -> String {
    let out = std::process::Command::new(harness::tool("redis-benchmark"))
        .args(["-h", "127.0.0.1", "-p", &s.port.to_string()])
        .args(args)
        .output()
        .expect("run redis-benchmark");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "redis-benchmark failed:\n{stdout}\n{stderr}"
    );
    assert!(
        !stdout.contains("ERR") && !stderr.contains("ERR"),
        "errors:\n{stdout}\n{stderr}"
    );
    stdout
}

/// Parses `--csv` output into (test, rps).
fn csv_rates(stdout: &str) -> Vec<(String, f64)> {
    stdout
        .lines()
        .filter(|l| !l.starts_with("\"test\""))
        .filter_map(|l| {
            let mut cols = l.split(',').map(|c| c.trim_matches('"'));
            let name = cols.next()?.to_string();
            let rps = cols.next()?.parse().ok()?;
            Some((name, rps))
        })
        .collect()
}

#[test]
fn redis_benchmark_pipelined_csv() {
    let s = TestServer::start();
    let stdout = benchmark(
        &s,
        &[
            "-t",
            "ping,set,get,incr,mset",
            "-P",
            "16",
            "-n",
            "20000",
            "--csv",
        ],
    );
    let rates = csv_rates(&stdout);
    let names: Vec<&str> = rates.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "PING_INLINE",
            "PING_MBULK",
            "SET",
            "GET",
            "INCR",
            "MSET (10 keys)"
        ],
        "{stdout}"
    );
    for (name, rps) in &rates {
        assert!(*rps > 0.0, "{name}: {rps} req/s");
    }
    // The benchmark's INCRs all land on one key: 20000 of them.
    assert_eq!(s.cli_out(&["GET", "counter:__rand_int__"]), "20000");
}

#[test]
fn redis_benchmark_many_clients_unpipelined() {
    let s = TestServer::start();
    let stdout = benchmark(
        &s,
        &[
            "-t", "set,get", "-c", "50", "-P", "1", "-n", "5000", "-d", "100", "-q",
        ],
    );
    // -q prints progress lines ended by \r and one final line per test ended by \n.
    let finals: Vec<&str> = stdout
        .split('\n')
        .filter_map(|l| l.rsplit('\r').next())
        .map(str::trim)
        .filter(|l| l.contains("requests per second"))
        .collect();
    assert_eq!(finals.len(), 2, "{stdout:?}");
    for (line, name) in finals.iter().zip(["SET", "GET"]) {
        assert!(line.starts_with(&format!("{name}: ")), "{line}");
        let rps: f64 = line[name.len() + 2..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(rps > 0.0, "{line}");
    }
    // SET wrote a 100-byte value.
    assert_eq!(s.cli_out(&["STRLEN", "key:__rand_int__"]), "100");
}

// ---------------------------------------------------------------- the redis crate

#[test]
fn redis_crate_sync() {
    let s = TestServer::start();
    let mut con = s.conn();
    let () = redis::cmd("SET")
        .arg("greeting")
        .arg("hi")
        .query(&mut con)
        .unwrap();
    let v: String = redis::cmd("GET").arg("greeting").query(&mut con).unwrap();
    assert_eq!(v, "hi");
    let missing: Option<String> = redis::cmd("GET").arg("nope").query(&mut con).unwrap();
    assert_eq!(missing, None);
    let n: i64 = redis::cmd("INCRBY")
        .arg("ctr")
        .arg(5)
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 5);
    // A server error surfaces as a typed error with Redis's text.
    let err = redis::cmd("INCR")
        .arg("greeting")
        .query::<i64>(&mut con)
        .unwrap_err();
    assert_eq!(err.code(), Some("ERR"));
    assert!(
        err.to_string()
            .contains("value is not an integer or out of range"),
        "{err}"
    );
    // ...and the connection is still usable.
    let v: String = redis::cmd("GET").arg("greeting").query(&mut con).unwrap();
    assert_eq!(v, "hi");
}

#[test]
fn redis_crate_pipelines() {
    let s = TestServer::start();
    let mut con = s.conn();
    let mut p = redis::pipe();
    for i in 0..1000 {
        p.cmd("SET").arg(format!("p:{i}")).arg(i).ignore();
    }
    p.cmd("GET")
        .arg("p:0")
        .cmd("GET")
        .arg("p:999")
        .cmd("DBSIZE");
    let (a, b, n): (i64, i64, usize) = p.query(&mut con).unwrap();
    assert_eq!((a, b, n), (0, 999, 1000));

    // A pipeline whose middle command fails: the crate reports the failure with its
    // index, and the server still ran the commands after it, in order.
    let err = redis::pipe()
        .cmd("SET")
        .arg("x")
        .arg("1")
        .cmd("INCR")
        .arg("p:counter")
        .cmd("NOT_A_COMMAND")
        .arg("x")
        .cmd("INCR")
        .arg("p:counter")
        .query::<Vec<Value>>(&mut con)
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("Index 2") && text.contains("unknown command 'NOT_A_COMMAND'"),
        "{text}"
    );
    let x: String = redis::cmd("GET").arg("x").query(&mut con).unwrap();
    assert_eq!(x, "1");
    let ctr: i64 = redis::cmd("GET").arg("p:counter").query(&mut con).unwrap();
    assert_eq!(ctr, 2);
}

#[test]
fn redis_crate_atomic_pipeline() {
    let s = TestServer::start();
    let mut con = s.conn();
    let (a, b, n): (i64, i64, i64) = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("t:a")
        .arg(10)
        .ignore()
        .cmd("INCRBY")
        .arg("t:a")
        .arg(5)
        .cmd("DECR")
        .arg("t:a")
        .cmd("EXISTS")
        .arg("t:a")
        .query(&mut con)
        .unwrap();
    assert_eq!((a, b, n), (15, 14, 1));

    // WATCH + a conflicting write from another client aborts the transaction: the
    // redis crate reports an aborted EXEC as a nil result.
    let mut other = s.conn();
    let () = redis::cmd("WATCH").arg("t:a").query(&mut con).unwrap();
    let () = redis::cmd("SET")
        .arg("t:a")
        .arg("changed")
        .query(&mut other)
        .unwrap();
    let res: Option<(i64,)> = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("t:a")
        .query(&mut con)
        .unwrap();
    assert_eq!(res, None);
    let v: String = redis::cmd("GET").arg("t:a").query(&mut con).unwrap();
    assert_eq!(v, "changed");
}

#[test]
fn redis_crate_resp3() {
    let s = TestServer::start();
    let client = redis::Client::open(format!("{}?protocol=resp3", s.url())).unwrap();
    let mut con = client.get_connection().unwrap();
    let () = redis::cmd("SET")
        .arg("r3")
        .arg("three")
        .query(&mut con)
        .unwrap();
    let v: String = redis::cmd("GET").arg("r3").query(&mut con).unwrap();
    assert_eq!(v, "three");
    // A missing key is RESP3's null.
    let v: Value = redis::cmd("GET").arg("missing").query(&mut con).unwrap();
    assert_eq!(v, Value::Nil);
    // The connection really is RESP3: HELLO (no version) answers with a map, proto 3.
    let hello: Value = redis::cmd("HELLO").query(&mut con).unwrap();
    let Value::Map(fields) = hello else {
        panic!("HELLO on a RESP3 connection returned {hello:?}")
    };
    let proto = fields
        .iter()
        .find(|(k, _)| matches!(k, Value::BulkString(b) if b == b"proto"))
        .map(|(_, v)| v.clone());
    assert_eq!(proto, Some(Value::Int(3)));

    let mut con2 = s.conn();
    let hello2: Value = redis::cmd("HELLO").query(&mut con2).unwrap();
    assert!(
        matches!(hello2, Value::Array(ref a) if a.len() == 14),
        "RESP2 HELLO: {hello2:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crate_async_resp3() {
    let s = TestServer::start();
    let client = redis::Client::open(format!("{}?protocol=resp3", s.url())).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("SET")
        .arg("a3")
        .arg("v")
        .query_async(&mut con)
        .await
        .unwrap();
    let v: String = redis::cmd("GET")
        .arg("a3")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(v, "v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crate_async_multiplexed_many_tasks() {
    let s = TestServer::start();
    let con = s.client().get_multiplexed_async_connection().await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..64 {
        let mut con = con.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..100 {
                let key = format!("task:{t}:{i}");
                let val = format!("{t}-{i}-{}", "x".repeat((t * 7 + i) % 50));
                let () = redis::cmd("SET")
                    .arg(&key)
                    .arg(&val)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                let got: String = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                assert_eq!(got, val, "task {t} read another task's reply");
                let n: i64 = redis::cmd("INCR")
                    .arg(format!("ctr:{t}"))
                    .query_async(&mut con)
                    .await
                    .unwrap();
                assert_eq!(n, i as i64 + 1);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut con = con;
    let n: usize = redis::cmd("DBSIZE").query_async(&mut con).await.unwrap();
    assert_eq!(n, 64 * 100 + 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_crate_async_pipeline_and_transaction() {
    let s = TestServer::start();
    let mut con = s.client().get_multiplexed_async_connection().await.unwrap();
    let mut p = redis::pipe();
    for i in 0..500 {
        p.cmd("SET").arg(format!("ap:{i}")).arg(i * 2).ignore();
    }
    for i in [0, 250, 499] {
        p.cmd("GET").arg(format!("ap:{i}"));
    }
    let got: (i64, i64, i64) = p.query_async(&mut con).await.unwrap();
    assert_eq!(got, (0, 500, 998));
    let (v,): (Vec<Option<String>>,) = redis::pipe()
        .atomic()
        .cmd("MSET")
        .arg("m1")
        .arg("a")
        .arg("m2")
        .arg("b")
        .ignore()
        .cmd("MGET")
        .arg("m1")
        .arg("m2")
        .arg("m3")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(v, [Some("a".to_string()), Some("b".to_string()), None]);
}
