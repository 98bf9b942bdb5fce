//! Observability with real clients: INFO's sampled rates, errorstats and
//! latencystats, SLOWLOG, LATENCY, `redis-cli --latency-history` and MONITOR
//! (through redis-cli and a raw socket), against the real binary.

mod harness;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use harness::TestServer;
use redis::Value;

/// `name:value` from an INFO reply.
fn info_field(conn: &mut redis::Connection, section: &str, name: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")).map(str::to_string))
}

fn config_set(conn: &mut redis::Connection, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(conn)
        .unwrap();
}

/// Polls `check` every 20 ms until it holds or `within` passes.
fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn instantaneous_ops_per_sec_moves_while_redis_benchmark_runs() {
    let s = TestServer::start();
    let mut c = s.conn();
    assert_eq!(
        info_field(&mut c, "stats", "instantaneous_ops_per_sec").as_deref(),
        Some("0")
    );
    let mut bench = Command::new(harness::tool("redis-benchmark"))
        .args(["-h", "127.0.0.1", "-p", &s.port.to_string()])
        .args([
            "-n",
            "100000000",
            "-P",
            "16",
            "-c",
            "4",
            "-t",
            "set,get",
            "-q",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run redis-benchmark");
    let mut seen = (0u64, 0f64, 0f64);
    let moved = eventually(Duration::from_secs(20), || {
        let ops = info_field(&mut c, "stats", "instantaneous_ops_per_sec").unwrap();
        let input = info_field(&mut c, "stats", "instantaneous_input_kbps").unwrap();
        let output = info_field(&mut c, "stats", "instantaneous_output_kbps").unwrap();
        seen = (
            ops.parse().unwrap(),
            input.parse().unwrap(),
            output.parse().unwrap(),
        );
        seen.0 > 0 && seen.1 > 0.0 && seen.2 > 0.0
    });
    let _ = bench.kill();
    let _ = bench.wait();
    assert!(moved, "rates stayed at {seen:?}");
}

#[test]
fn errorstats_count_by_code_and_reset() {
    let s = TestServer::start();
    let mut c = s.conn();
    let _: () = redis::cmd("SADD").arg("set").arg(1).query(&mut c).unwrap();
    let _: () = redis::cmd("SET").arg("str").arg("x").query(&mut c).unwrap();
    // ERR: unknown command, arity, a failing command; WRONGTYPE; and an error
    // inside EXEC, counted with the queued command's reply.
    let errors = [
        redis::cmd("NOSUCH").query::<Value>(&mut c),
        redis::cmd("GET").query::<Value>(&mut c),
        redis::cmd("INCR").arg("str").query::<Value>(&mut c),
        redis::cmd("INCR").arg("set").query::<Value>(&mut c),
    ];
    assert!(errors.iter().all(|e| e.is_err()));
    let _ = redis::pipe()
        .atomic()
        .cmd("INCR")
        .arg("str")
        .query::<Value>(&mut c);
    let info: String = redis::cmd("INFO").arg("errorstats").query(&mut c).unwrap();
    assert!(info.contains("# Errorstats"), "{info}");
    assert!(info.contains("errorstat_ERR:count=4"), "{info}");
    assert!(info.contains("errorstat_WRONGTYPE:count=1"), "{info}");
    assert_eq!(
        info_field(&mut c, "stats", "total_error_replies").as_deref(),
        Some("5")
    );
    // In the default INFO too, as Redis has it.
    let all: String = redis::cmd("INFO").query(&mut c).unwrap();
    assert!(all.contains("errorstat_WRONGTYPE:count=1"));

    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(&mut c).unwrap();
    let info: String = redis::cmd("INFO").arg("errorstats").query(&mut c).unwrap();
    assert!(!info.contains("errorstat_"), "{info}");
}

#[test]
fn noauth_is_counted_under_its_code() {
    let s = TestServer::start_with(&["--requirepass", "pw"]);
    let mut raw = s.raw();
    raw.write_all(b"GET k\r\nAUTH pw\r\nINFO errorstats\r\n")
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // (The harness's readiness PING was refused too, so the count is not 1.)
    while !String::from_utf8_lossy(&got).contains("errorstat_NOAUTH:count=") {
        let n = raw.read(&mut buf).expect("INFO reply");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn latencystats_and_histogram_after_commands() {
    let s = TestServer::start();
    let mut c = s.conn();
    for i in 0..100 {
        let _: () = redis::cmd("SET").arg("k").arg(i).query(&mut c).unwrap();
    }
    let info: String = redis::cmd("INFO")
        .arg("latencystats")
        .query(&mut c)
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("latency_percentiles_usec_set:"))
        .unwrap_or_else(|| panic!("no set line in {info}"));
    let fields: Vec<&str> = line.split(':').nth(1).unwrap().split(',').collect();
    assert_eq!(fields.len(), 3, "{line}");
    for (f, name) in fields.iter().zip(["p50", "p99", "p99.9"]) {
        let (n, v) = f.split_once('=').unwrap();
        assert_eq!(n, name);
        assert!(v.parse::<f64>().unwrap() > 0.0, "{line}");
    }
    config_set(&mut c, "latency-tracking-info-percentiles", "90");
    let info: String = redis::cmd("INFO")
        .arg("latencystats")
        .query(&mut c)
        .unwrap();
    assert!(info.contains("latency_percentiles_usec_set:p90="), "{info}");

    // LATENCY HISTOGRAM: calls, and cumulative counts ending at the total.
    let out = s.cli_out(&["latency", "histogram", "set"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        &lines[..4],
        &["set", "calls", "100", "histogram_usec"],
        "{out}"
    );
    assert_eq!(lines.last(), Some(&"100"), "{out}");

    config_set(&mut c, "latency-tracking", "no");
    let info: String = redis::cmd("INFO")
        .arg("latencystats")
        .query(&mut c)
        .unwrap();
    assert!(!info.contains("latency_percentiles_usec_"), "{info}");
}

/// The entries of SLOWLOG GET, as (id, µs, args, addr, name).
fn slowlog(c: &mut redis::Connection, count: i64) -> Vec<(i64, i64, Vec<String>, String, String)> {
    let v: Vec<(i64, i64, i64, Vec<String>, String, String)> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(count)
        .query(c)
        .unwrap();
    v.into_iter()
        .map(|(id, _, us, args, addr, name)| (id, us, args, addr, name))
        .collect()
}

#[test]
fn slowlog_catches_slow_commands() {
    let s = TestServer::start();
    let mut c = s.conn();
    let got: String = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-log-slower-than")
        .query::<Vec<String>>(&mut c)
        .unwrap()
        .join(" ");
    assert_eq!(got, "slowlog-log-slower-than 10000");
    config_set(&mut c, "slowlog-log-slower-than", "0");
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("obs")
        .query(&mut c)
        .unwrap();
    let long = "x".repeat(200);
    let _: () = redis::cmd("SET").arg("k").arg(&long).query(&mut c).unwrap();
    let mut mset = redis::cmd("MSET");
    for i in 0..40 {
        mset.arg(format!("k{i}")).arg(i);
    }
    let _: () = mset.query(&mut c).unwrap();
    let entries = slowlog(&mut c, 2);
    assert_eq!(entries.len(), 2);
    let (id_mset, _, args, addr, name) = &entries[0];
    assert_eq!(args.len(), 32);
    assert_eq!(args[0], "MSET");
    assert_eq!(args[31], "... (50 more arguments)");
    assert!(addr.starts_with("127.0.0.1:"));
    assert_eq!(name, "obs");
    let (id_set, _, args, _, _) = &entries[1];
    assert_eq!(*id_mset, id_set + 1);
    assert_eq!(args[2], format!("{}... (72 more bytes)", &long[..128]));

    // A command that is slow for real shows up with its duration under the
    // default threshold too: KEYS over many keys.
    config_set(&mut c, "slowlog-log-slower-than", "1000");
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut c).unwrap();
    fill(&mut c, 200_000);
    let _: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    // Logging off before reading, so that a SLOWLOG GET slow enough to be logged
    // itself (a busy machine) cannot make LEN disagree with what GET returned.
    config_set(&mut c, "slowlog-log-slower-than", "-1");
    let entries = slowlog(&mut c, -1);
    let keys = entries
        .iter()
        .find(|e| e.2 == ["KEYS", "*"])
        .unwrap_or_else(|| panic!("KEYS not logged: {entries:?}"));
    assert!(keys.1 >= 1000);
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut c).unwrap();
    assert_eq!(len as usize, entries.len());

    let _: () = redis::cmd("SLOWLOG").arg("RESET").query(&mut c).unwrap();
    let _: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert!(slowlog(&mut c, 10).is_empty());

    config_set(&mut c, "slowlog-log-slower-than", "0");
    config_set(&mut c, "slowlog-max-len", "3");
    for _ in 0..10 {
        let _: () = redis::cmd("PING").query(&mut c).unwrap();
    }
    let len: i64 = redis::cmd("SLOWLOG").arg("LEN").query(&mut c).unwrap();
    assert_eq!(len, 3);
    let err = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-2)
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(err
        .to_string()
        .contains("count should be greater than or equal to -1"));
}

/// Adds `n` keys in pipelined MSETs.
fn fill(c: &mut redis::Connection, n: usize) {
    let mut pipe = redis::pipe();
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let mut mset = redis::cmd("MSET");
        for i in chunk {
            mset.arg(format!("fill:{i}")).arg(1);
        }
        pipe.add_command(mset).ignore();
    }
    let _: () = pipe.query(c).unwrap();
}

#[test]
fn latency_monitor_records_a_slow_command() {
    let s = TestServer::start();
    let mut c = s.conn();
    let latest: Vec<Value> = redis::cmd("LATENCY").arg("LATEST").query(&mut c).unwrap();
    assert!(latest.is_empty());
    fill(&mut c, 200_000);
    config_set(&mut c, "latency-monitor-threshold", "1");
    let _: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    let latest: Vec<(String, i64, i64, i64)> =
        redis::cmd("LATENCY").arg("LATEST").query(&mut c).unwrap();
    let (_, time, last, max) = latest
        .iter()
        .find(|e| e.0 == "command")
        .unwrap_or_else(|| panic!("no command event: {latest:?}"));
    assert!(*time > 1_600_000_000 && *last >= 1 && max >= last);
    let history: Vec<(i64, i64)> = redis::cmd("LATENCY")
        .arg("HISTORY")
        .arg("command")
        .query(&mut c)
        .unwrap();
    assert!(!history.is_empty() && history.iter().all(|&(_, ms)| ms >= 1));
    let gone: i64 = redis::cmd("LATENCY")
        .arg("RESET")
        .arg("command")
        .query(&mut c)
        .unwrap();
    assert_eq!(gone, 1);
    let history: Vec<Value> = redis::cmd("LATENCY")
        .arg("HISTORY")
        .arg("command")
        .query(&mut c)
        .unwrap();
    assert!(history.is_empty());
    let help = s.cli_out(&["latency", "help"]);
    assert!(help.starts_with("LATENCY <subcommand>"), "{help}");
}

#[test]
fn redis_cli_latency_history_reports() {
    let s = TestServer::start();
    // stdbuf: into a pipe redis-cli would buffer its lines until the timeout
    // kills it, losing them.
    let out = Command::new("timeout")
        .args([
            "3",
            "stdbuf",
            "-oL",
            harness::tool("redis-cli").to_str().unwrap(),
        ])
        .args(["-p", &s.port.to_string(), "--latency-history", "-i", "1"])
        .output()
        .expect("run redis-cli --latency-history");
    let text = String::from_utf8_lossy(&out.stdout);
    // Without a terminal each sample is a line: min, max, avg, samples.
    let first = text
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no output: {out:?}"));
    let fields: Vec<&str> = first.split_whitespace().collect();
    assert_eq!(fields.len(), 4, "{first}");
    assert!(fields.iter().all(|f| f.parse::<f64>().is_ok()), "{first}");
}

#[test]
fn redis_cli_monitor_sees_another_clients_set() {
    let s = TestServer::start();
    let mut mon = Command::new(harness::tool("redis-cli"))
        .args(["-p", &s.port.to_string(), "monitor"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run redis-cli monitor");
    let (tx, rx) = mpsc::channel();
    let stdout = mon.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "OK");
    let mut c = s.conn();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("a \"v\"")
        .query(&mut c)
        .unwrap();
    // The crate's CLIENT SETINFO on connect comes first.
    let line = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(10)).ok())
        .find(|l| !l.contains("\"CLIENT\""))
        .expect("a line");
    let _ = mon.kill();
    let _ = mon.wait();
    assert!(line.contains("] \"SET\" \"k\" \"a \\\"v\\\"\""), "{line}");
    assert!(line.contains("[0 127.0.0.1:"), "{line}");
}

/// Reads one CRLF-terminated line from a raw socket.
fn read_line(r: &mut BufReader<std::net::TcpStream>) -> String {
    let mut line = String::new();
    r.read_line(&mut line).expect("a line");
    line
}

#[test]
fn monitor_over_a_raw_socket_redacts_and_stops_on_reset() {
    let s = TestServer::start();
    let mut raw = s.raw();
    raw.write_all(b"MONITOR\r\n").unwrap();
    let mut r = BufReader::new(raw.try_clone().unwrap());
    assert_eq!(read_line(&mut r), "+OK\r\n");
    let mut c = s.conn();
    let _ = redis::cmd("AUTH").arg("secret").query::<Value>(&mut c);
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    // CONFIG is administrative: never shown.
    let _: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("hz")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("PING").query(&mut c).unwrap();
    let lines: Vec<String> = std::iter::repeat_with(|| read_line(&mut r))
        .filter(|l| !l.contains("\"CLIENT\""))
        .take(3)
        .collect();
    assert!(
        lines[0].starts_with('+') && lines[0].ends_with("\"AUTH\" \"(redacted)\"\r\n"),
        "{lines:?}"
    );
    assert!(lines[1].ends_with("\"SET\" \"k\" \"v\"\r\n"), "{lines:?}");
    assert!(lines[2].ends_with("\"PING\"\r\n"), "{lines:?}");

    raw.write_all(b"RESET\r\n").unwrap();
    assert_eq!(read_line(&mut r), "+RESET\r\n");
    let _: () = redis::cmd("SET").arg("k").arg("w").query(&mut c).unwrap();
    raw.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_line(&mut r), "+PONG\r\n");
}

#[test]
fn monitor_that_never_reads_is_disconnected_by_the_output_limit() {
    let s = TestServer::start();
    let mut c = s.conn();
    config_set(&mut c, "client-output-buffer-limit", "normal 2mb 0 0");
    let mut raw = s.raw();
    raw.write_all(b"MONITOR\r\n").unwrap();
    let mut ok = [0u8; 5];
    raw.read_exact(&mut ok).unwrap();
    // The feed quotes each byte of these values as \x00-style escapes, so 100
    // SETs of 256 KB make about 100 MB of output the monitor never reads.
    let value = vec![0u8; 256 * 1024];
    let dropped = eventually(Duration::from_secs(30), || {
        for _ in 0..10 {
            let _: () = redis::cmd("SET")
                .arg("big")
                .arg(&value)
                .query(&mut c)
                .unwrap();
        }
        info_field(&mut c, "stats", "client_output_buffer_limit_disconnections").as_deref()
            != Some("0")
    });
    assert!(dropped, "the monitor was never disconnected");
    // The server is fine, and the monitor gone.
    let gone = eventually(Duration::from_secs(10), || {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).unwrap();
        clients.lines().count() == 1
    });
    assert!(gone, "the monitor is still connected");
}

#[test]
fn config_rows_answer_as_redis() {
    let s = TestServer::start();
    let got = s.cli_out(&["config", "get", "slowlog*"]);
    assert_eq!(got, "slowlog-log-slower-than\n10000\nslowlog-max-len\n128");
    let got = s.cli_out(&["config", "get", "latency-tracking*"]);
    assert_eq!(
        got,
        "latency-tracking\nyes\nlatency-tracking-info-percentiles\n50 99 99.9"
    );
    for (args, err) in [
        (
            ["slowlog-max-len", "-1"],
            "ERR CONFIG SET failed (possibly related to argument 'slowlog-max-len') - argument must be between 0 and 9223372036854775807 inclusive",
        ),
        (
            ["slowlog-log-slower-than", "-2"],
            "ERR CONFIG SET failed (possibly related to argument 'slowlog-log-slower-than') - argument must be between -1 and 9223372036854775807 inclusive",
        ),
        (
            ["latency-tracking-info-percentiles", "50 abc"],
            "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - Invalid latency-tracking-info-percentiles parameters",
        ),
        (
            ["latency-tracking-info-percentiles", "101"],
            "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - latency-tracking-info-percentiles parameters should sit between [0.0,100.0]",
        ),
    ] {
        assert_eq!(s.cli_out(&["config", "set", args[0], args[1]]), err);
    }
    assert_eq!(
        s.cli_out(&["slowlog", "get", "1", "2"]),
        "ERR unknown subcommand or wrong number of arguments for 'get'. Try SLOWLOG HELP."
    );
    let help = s.cli_out(&["slowlog", "help"]);
    assert!(help.starts_with("SLOWLOG <subcommand>") && help.ends_with("Prints this help."));
    // Inside a transaction MONITOR is refused, as Redis refuses it.
    let mut c = s.conn();
    let replies: Result<Value, _> = redis::pipe().atomic().cmd("MONITOR").query(&mut c);
    let text = format!("{replies:?}");
    assert!(
        text.contains("MONITOR isn't allowed for DENY BLOCKING client"),
        "{text}"
    );
}

#[test]
fn avg_ttl_is_estimated_by_the_expiry_cycle() {
    let s = TestServer::start();
    let mut c = s.conn();
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("t{i}"))
            .arg(1)
            .arg("EX")
            .arg(100)
            .query(&mut c)
            .unwrap();
    }
    let mut line = String::new();
    let estimated = eventually(Duration::from_secs(10), || {
        line = info_field(&mut c, "keyspace", "db0").unwrap_or_default();
        let avg: u64 = line
            .rsplit("avg_ttl=")
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        (90_000..=100_000).contains(&avg)
    });
    assert!(estimated, "{line}");

    // Redis 7.4 weighs a cycle's mean by how much it sampled: half the keys now
    // have ten times the TTL, and the estimate follows within a few cycles (7.2's
    // 2% a cycle would still be under 300 s after 3 s).
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("long{i}"))
            .arg(1)
            .arg("EX")
            .arg(1000)
            .query(&mut c)
            .unwrap();
    }
    let followed = eventually(Duration::from_secs(3), || {
        line = info_field(&mut c, "keyspace", "db0").unwrap_or_default();
        let avg: u64 = line
            .rsplit("avg_ttl=")
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        (450_000..=560_000).contains(&avg)
    });
    assert!(followed, "{line}");
}
