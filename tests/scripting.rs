//! Lua scripting (issue 18): replies, errors and conversions byte for byte against
//! a real redis-server, the script cache, the sandbox, the atomicity rule (a
//! script locks its declared keys' shards; undeclared keys are refused), and
//! BUSY / SCRIPT KILL.

mod harness;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::fenced::{same_answers, Conn};
use harness::real_redis::RedisServer;
use harness::{resp_cmd, TestServer};
use relcache_protocol::resp::{parse_frame, Limits};

/// Scripts whose replies must be redis-server's, byte for byte: every conversion
/// both ways, in RESP2 and RESP3, and the errors (with their `script: <sha>, on
/// @user_script:<line>.` tail).
const SCRIPTS: &[&[&str]] = &[
    &["EVAL", "return 1", "0"],
    &["EVAL", "return ('ab'):rep(3)", "0"],
    &["EVAL", "return string.rep('x')", "0"],
    &["EVAL", "return string.rep({}, 2)", "0"],
    &["EVAL", "return 3.99", "0"],
    &["EVAL", "return -2.7", "0"],
    &["EVAL", "return 1e20", "0"],
    &["EVAL", "return 'hello'", "0"],
    &["EVAL", "return true", "0"],
    &["EVAL", "return false", "0"],
    &["EVAL", "return nil", "0"],
    &["EVAL", "return {1, 'a', true, false, {ok='x'}, {err='y'}}", "0"],
    &["EVAL", "return {1, 2, nil, 3}", "0"],
    &["EVAL", "return {1, {2, {3}}, 'x', 3.7, -2.2}", "0"],
    &["EVAL", "return {ok='FINE'}", "0"],
    &["EVAL", "return {err='boom'}", "0"],
    &["EVAL", "return {err='-boom'}", "0"],
    &["EVAL", "return redis.error_reply('My Error')", "0"],
    &["EVAL", "return redis.error_reply('-My Error')", "0"],
    &["EVAL", "return redis.status_reply('FINE')", "0"],
    &["EVAL", "return {double=3.5}", "0"],
    &["EVAL", "return {map={a=1}}", "0"],
    &["EVAL", "return {set={a=true}}", "0"],
    &["EVAL", "return {big_number='123'}", "0"],
    &["EVAL", "return {verbatim_string={format='txt', string='hi'}}", "0"],
    &["EVAL", "redis.setresp(3) return true", "0"],
    &["EVAL", "redis.setresp(3) return false", "0"],
    &["EVAL", "return redis.call('get', KEYS[1])", "1", "missing"],
    &["EVAL", "return {redis.call('get', KEYS[1])}", "1", "missing"],
    &["EVAL", "redis.setresp(3) return redis.call('get', KEYS[1]) == nil", "1", "missing"],
    &["EVAL", "return redis.call('get', KEYS[1])", "1", "s"],
    &["EVAL", "return redis.call('ping')", "0"],
    &["EVAL", "local t = redis.call('ping') return type(t) .. t.ok", "0"],
    &["EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "k", "v"],
    &["EVAL", "return redis.call('incr', KEYS[1])", "1", "n"],
    &["EVAL", "return redis.call('incrbyfloat', KEYS[1], '1.5')", "1", "f"],
    &["EVAL", "redis.setresp(3) return redis.call('incrbyfloat', KEYS[1], '1.5')", "1", "f"],
    &["EVAL", "return redis.call('smembers', KEYS[1])", "1", "missing"],
    &["EVAL", "redis.call('sadd', KEYS[1], 1, 2, 30) return redis.call('smismember', KEYS[1], 1, 4, 30, 'x')", "1", "ids"],
    &["EVAL", "local r = redis.call('smismember', KEYS[1], 2, 9) return {type(r), #r, r[1], r[2]}", "1", "ids"],
    &["EVAL", "redis.setresp(3) return redis.call('smismember', KEYS[1], 30, 31)", "1", "ids"],
    &["EVAL", "redis.setresp(3) return redis.call('smembers', KEYS[1])", "1", "missing"],
    &["EVAL", "return {KEYS[1], KEYS[2], ARGV[1], ARGV[2], #KEYS, #ARGV}", "2", "k1", "k2", "a1", "a2"],
    &["EVAL", "return redis.call('incr', KEYS[1])", "1", "s"],
    &["EVAL", "\n\nreturn redis.call('incr', KEYS[1])", "1", "s"],
    &["EVAL", "return redis.pcall('incr', KEYS[1])", "1", "s"],
    &["EVAL", "local e = redis.pcall('incr', KEYS[1]) return e.err", "1", "s"],
    &["EVAL", "local ok, e = pcall(redis.call, 'incr', KEYS[1]) return {tostring(ok), e}", "1", "s"],
    &["EVAL", "return redis.call('nosuchcommand')", "0"],
    &["EVAL", "return redis.pcall('nosuchcommand')", "0"],
    &["EVAL", "return redis.call('get')", "0"],
    &["EVAL", "return redis.call()", "0"],
    &["EVAL", "return redis.call('get', {})", "0"],
    &["EVAL", "return redis.call('multi')", "0"],
    &["EVAL", "return redis.call('eval', 'return 1', '0')", "0"],
    &["EVAL", "redis.setresp(4)", "0"],
    &["EVAL", "error('xx')", "0"],
    &["EVAL", "error({err='E1 x'})", "0"],
    &["EVAL", "error()", "0"],
    &["EVAL", "return 'x' .. nil", "0"],
    &["EVAL", "syntax error here", "0"],
    &["EVAL", "return 1", "-1"],
    &["EVAL", "return 1", "2", "a"],
    &["EVAL", "return 1", "x"],
    &["EVAL_RO", "return redis.call('set', KEYS[1], 'v')", "1", "k"],
    &["EVAL", "#!lua flags=no-writes\nreturn redis.call('set', KEYS[1], 'v')", "1", "k"],
    &["EVAL", "#!lua flags=bogus\nreturn 1", "0"],
    &["EVAL", "#!lua name=x\nreturn 1", "0"],
    &["EVAL", "#!foo\nreturn 1", "0"],
    &["EVAL", "#!lua\nreturn 2", "0"],
    // The sandbox: no io, require, loadfile, dofile, print; no new globals (of
    // `os`, only 7.4's `os.clock`, checked below: the reference server is 7.0).
    &["EVAL", "return io.open('/etc/passwd')", "0"],
    &["EVAL", "return require('x')", "0"],
    &["EVAL", "return loadfile('/etc/passwd')", "0"],
    &["EVAL", "return dofile('/etc/passwd')", "0"],
    &["EVAL", "print('x')", "0"],
    &["EVAL", "x = 1", "0"],
    &["EVAL", "string.foo = 1", "0"],
    &["EVAL", "_G.x = 1", "0"],
    &["EVAL", "rawset(_G, 'x', 1)", "0"],
    &["EVAL", "local t = {} t.x = 1 return t.x", "0"],
    &["EVAL", "return {type(cjson), type(bit), type(loadstring), type(unpack), _VERSION}", "0"],
    &["EVAL", "return cjson.encode({1, 2, 3})", "0"],
    &["EVAL", "return cjson.decode('[1,2,{\"a\":\"x\"}]')[3].a", "0"],
    &["EVAL", "return {bit.band(0xff, 0x0f), bit.bor(1, 2), bit.bxor(3, 1), bit.lshift(1, 31), bit.tohex(255), bit.bnot(0)}", "0"],
    &["EVAL", "return redis.sha1hex('abc')", "0"],
    &["EVAL", "return redis.LOG_WARNING", "0"],
    // Bytecode is parsed as text, so refused as a syntax error, however it comes.
    &["EVAL", "local f, e = loadstring(string.dump(function() return 1 end), 'nm') return {tostring(f), e}", "0"],
    &["EVAL", "local i = 0 local f, e = load(function() i = i + 1 if i == 1 then return string.char(27) .. 'Lua' end end) return {tostring(f), e}", "0"],
    &["EVAL", "\u{1b}LuaQ", "0"],
    &["EVAL", "return {loadstring('return 5')(), load(function() return nil end) ~= nil}", "0"],
    &["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "0"],
    &["SCRIPT", "KILL"],
    &["SCRIPT", "FLUSH", "bogus"],
];

fn compare(ours: &mut Conn, theirs: &mut Conn, proto: &str) {
    for c in [&mut *ours, &mut *theirs] {
        c.call(&["HELLO", proto]);
        c.call(&["FLUSHALL"]);
        c.call(&["SET", "s", "str"]);
    }
    same_answers(ours, theirs, SCRIPTS, &format!("RESP{proto}"), Conn::reply);
}

#[test]
fn replies_and_errors_match_redis_byte_for_byte() {
    let s = TestServer::start();
    let r = RedisServer::start();
    let (mut ours, mut theirs) = (Conn::new(s.port), Conn::new(r.port));
    compare(&mut ours, &mut theirs, "2");
    compare(&mut ours, &mut theirs, "3");
}

#[test]
fn evalsha_finds_what_eval_and_script_load_cached_until_flush() {
    let s = TestServer::start();
    let mut c = Conn::new(s.port);
    let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"; // sha1("return 1")
    assert_eq!(
        c.reply(&["SCRIPT", "EXISTS", sha, "nope"]),
        "*2\r\n:0\r\n:0\r\n"
    );
    assert_eq!(c.reply(&["EVAL", "return 1", "0"]), ":1\r\n");
    assert_eq!(c.reply(&["EVALSHA", sha, "0"]), ":1\r\n");
    assert_eq!(c.reply(&["EVALSHA", &sha.to_uppercase(), "0"]), ":1\r\n");
    assert_eq!(
        c.reply(&["SCRIPT", "EXISTS", sha, "nope"]),
        "*2\r\n:1\r\n:0\r\n"
    );
    assert_eq!(c.reply(&["SCRIPT", "FLUSH", "ASYNC"]), "+OK\r\n");
    assert_eq!(
        c.reply(&["EVALSHA", sha, "0"]),
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    let loaded = c.reply(&["SCRIPT", "LOAD", "return ARGV[1]"]);
    let loaded_sha = loaded.lines().nth(1).unwrap().to_string();
    assert_eq!(loaded_sha.len(), 40);
    // From another connection (another worker thread, maybe): the cache is shared.
    let mut other = Conn::new(s.port);
    assert_eq!(
        other.reply(&["EVALSHA_RO", &loaded_sha, "0", "x"]),
        "$1\r\nx\r\n"
    );
    assert!(c
        .reply(&["SCRIPT", "LOAD", "not lua"])
        .starts_with("-ERR Error compiling script"));
    assert_eq!(c.reply(&["SCRIPT", "FLUSH"]), "+OK\r\n");
    assert_eq!(c.reply(&["SCRIPT", "EXISTS", &loaded_sha]), "*1\r\n:0\r\n");
}

/// The SHA1 of `body`, asked of the server through a script SCRIPT LOADed (so
/// it is never evicted and adds nothing to the EVAL cache).
fn sha1(c: &mut Conn, body: &str) -> String {
    let helper = c.reply(&["SCRIPT", "LOAD", "return redis.sha1hex(ARGV[1])"]);
    let helper = helper.lines().nth(1).unwrap().to_string();
    let reply = c.reply(&["EVALSHA", &helper, "0", body]);
    reply.lines().nth(1).unwrap().to_string()
}

fn info_stat(c: &mut Conn, name: &str) -> u64 {
    let info = c.reply(&["INFO", "stats"]);
    harness::info_value(&info, name)
}

#[test]
fn eval_keeps_the_500_scripts_run_last_and_script_load_keeps_all() {
    let s = TestServer::start();
    let mut c = Conn::new(s.port);
    let kept = c.reply(&["SCRIPT", "LOAD", "return 'loaded'"]);
    let kept = kept.lines().nth(1).unwrap().to_string();
    for i in 0..500 {
        assert_eq!(
            c.reply(&["EVAL", &format!("return {i}"), "0"]),
            format!(":{i}\r\n")
        );
    }
    assert_eq!(info_stat(&mut c, "evicted_scripts"), 0);
    // Running the oldest again (by EVALSHA) makes it the newest: the next EVAL of
    // a new body evicts `return 1` instead.
    let first = sha1(&mut c, "return 0");
    let second = sha1(&mut c, "return 1");
    assert_eq!(c.reply(&["EVALSHA", &first, "0"]), ":0\r\n");
    assert_eq!(c.reply(&["EVAL", "return 500", "0"]), ":500\r\n");
    assert_eq!(info_stat(&mut c, "evicted_scripts"), 1);
    assert_eq!(
        c.reply(&["EVALSHA", &second, "0"]),
        "-NOSCRIPT No matching script. Please use EVAL.\r\n"
    );
    assert_eq!(
        c.reply(&["SCRIPT", "EXISTS", &first, &second]),
        "*2\r\n:1\r\n:0\r\n"
    );
    // SCRIPT LOAD of a body EVAL cached keeps it from then on (Redis 7.4).
    let promoted = c.reply(&["SCRIPT", "LOAD", "return 500"]);
    let promoted = promoted.lines().nth(1).unwrap().to_string();
    // Another 500 new bodies, from another connection: every EVAL-cached script
    // before them goes, the SCRIPT LOADed ones stay.
    let mut other = Conn::new(s.port);
    for i in 0..500 {
        other.reply(&["EVAL", &format!("return {i} + 1"), "0"]);
    }
    assert_eq!(info_stat(&mut c, "evicted_scripts"), 500);
    assert_eq!(c.reply(&["SCRIPT", "EXISTS", &first]), "*1\r\n:0\r\n");
    assert_eq!(c.reply(&["EVALSHA", &kept, "0"]), "$6\r\nloaded\r\n");
    assert_eq!(c.reply(&["EVALSHA", &promoted, "0"]), ":500\r\n");
    // EVAL of a body again caches it again, and CONFIG RESETSTAT zeroes the count.
    assert_eq!(c.reply(&["EVAL", "return 1", "0"]), ":1\r\n");
    assert_eq!(c.reply(&["EVALSHA", &second, "0"]), ":1\r\n");
    c.reply(&["CONFIG", "RESETSTAT"]);
    assert_eq!(info_stat(&mut c, "evicted_scripts"), 0);
}

/// INFO memory's scripting fields, by Redis's names: the cached scripts, their
/// bodies' memory, and the Lua states' memory, which a thread's state shows
/// once it has run a script.
#[test]
fn info_memory_counts_the_scripts_and_the_lua_states() {
    let s = TestServer::start();
    let mut c = Conn::new(s.port);
    let field = |c: &mut Conn, name: &str| -> u64 {
        let info = c.reply(&["INFO", "memory"]);
        harness::info_value(&info, name)
    };
    assert_eq!(field(&mut c, "number_of_cached_scripts"), 0);
    assert_eq!(field(&mut c, "used_memory_scripts_eval"), 0);
    assert_eq!(c.reply(&["EVAL", "return 1", "0"]), ":1\r\n");
    let long = format!("return '{}'", "x".repeat(10_000));
    c.reply(&["SCRIPT", "LOAD", &long]);
    assert_eq!(field(&mut c, "number_of_cached_scripts"), 2);
    let bodies = field(&mut c, "used_memory_scripts_eval");
    assert!(bodies > 10_000, "{bodies}");
    assert_eq!(field(&mut c, "used_memory_scripts"), bodies);
    // A state starts at tens of KB (Redis's at 32 KB); one that has built a
    // table of 100,000 numbers shows it until its collector gets to it.
    let lua = field(&mut c, "used_memory_lua");
    assert!((16 << 10..4 << 20).contains(&lua), "{lua}");
    let built = "local t = {} for i = 1, 100000 do t[i] = i end return #t";
    assert_eq!(c.reply(&["EVAL", built, "0"]), ":100000\r\n");
    let grown = field(&mut c, "used_memory_vm_eval");
    assert!(grown > lua + (1 << 20), "{lua} -> {grown}");
    assert_eq!(field(&mut c, "used_memory_vm_total"), grown);
    assert_eq!(c.reply(&["SCRIPT", "FLUSH"]), "+OK\r\n");
    assert_eq!(field(&mut c, "number_of_cached_scripts"), 0);
    assert_eq!(field(&mut c, "used_memory_scripts_eval"), 0);

    // The same fields as Redis's INFO memory, in the same order.
    let redis = RedisServer::start();
    let mut theirs = Conn::new(redis.port);
    let names = |info: String| -> Vec<String> {
        info.lines()
            .filter_map(|l| l.split_once(':').map(|(k, _)| k.to_string()))
            .filter(|k| {
                k.contains("lua")
                    || k.contains("script")
                    || k.contains("_vm_")
                    || k.contains("function")
            })
            .collect()
    };
    assert_eq!(
        names(c.reply(&["INFO", "memory"])),
        names(theirs.reply(&["INFO", "memory"]))
    );
}

#[test]
fn lua_as_in_7_4_os_clock_and_integral_number_arguments() {
    let s = TestServer::start();
    let mut c = Conn::new(s.port);
    // os.clock() is the CPU time spent, in seconds; nothing else of os is there.
    let spent = c.reply(&[
        "EVAL",
        "local t0 = os.clock() local x = 0 for i = 1, 5000000 do x = x + i end \
         return tostring(os.clock() - t0)",
        "0",
    ]);
    let spent: f64 = spent.lines().nth(1).unwrap().parse().unwrap();
    assert!(
        spent > 0.0 && spent < 60.0,
        "os.clock() advanced by {spent}"
    );
    assert_eq!(
        c.reply(&[
            "EVAL",
            "return {type(os), type(os.clock), type(os.execute), type(os.getenv)}",
            "0"
        ]),
        "*4\r\n$5\r\ntable\r\n$8\r\nfunction\r\n$3\r\nnil\r\n$3\r\nnil\r\n"
    );
    assert!(c
        .reply(&["EVAL", "return os.execute('ls')", "0"])
        .contains("attempt to call field 'execute' (a nil value)"));
    assert!(c
        .reply(&["EVAL", "os.clock = nil", "0"])
        .contains("Attempt to modify a readonly table"));
    // A Lua number that is an integer reaches the command as one (7.2 sent
    // `2e+08`, which INCRBY refuses).
    assert_eq!(
        c.reply(&[
            "EVAL",
            "return redis.call('incrby', KEYS[1], 200000000)",
            "1",
            "n"
        ]),
        ":200000000\r\n"
    );
    assert_eq!(
        c.reply(&[
            "EVAL",
            "redis.call('set', KEYS[1], 123456789012345) return redis.call('get', KEYS[1])",
            "1",
            "big"
        ]),
        "$15\r\n123456789012345\r\n"
    );
    assert_eq!(
        c.reply(&[
            "EVAL",
            "redis.call('set', KEYS[1], 1/4) return redis.call('get', KEYS[1])",
            "1",
            "f"
        ]),
        "$4\r\n0.25\r\n"
    );
    assert!(c
        .reply(&["EVAL", "redis.log(7, 'x')", "0"])
        .contains("Invalid log level."));
    // The version scripts see is the one HELLO and INFO report.
    assert_eq!(
        c.reply(&[
            "EVAL",
            "return {redis.REDIS_VERSION, redis.REDIS_VERSION_NUM}",
            "0"
        ]),
        "*2\r\n$5\r\n7.4.0\r\n:459776\r\n"
    );
}

#[test]
fn an_undeclared_key_is_refused_unless_the_script_says_so() {
    let s = TestServer::start();
    let mut c = Conn::new(s.port);
    c.call(&["SET", "other", "1"]);
    let refused = c.reply(&["EVAL", "return redis.call('get', 'other')", "0"]);
    assert!(
        refused.starts_with(
            "-ERR Script attempted to access key 'other', which it did not declare in KEYS"
        ),
        "{refused}"
    );
    let keyspace = c.reply(&["EVAL", "return redis.call('keys', '*')", "1", "k"]);
    assert!(keyspace.contains("the whole keyspace"), "{keyspace}");
    assert_eq!(
        c.reply(&[
            "EVAL",
            "#!lua flags=allow-undeclared-keys\nreturn redis.call('get', 'other')",
            "0"
        ]),
        "$1\r\n1\r\n"
    );
    c.call(&["CONFIG", "SET", "lua-allow-undeclared-keys", "yes"]);
    assert_eq!(
        c.reply(&["EVAL", "return redis.call('keys', '*')", "0"]),
        "*1\r\n$5\r\nother\r\n"
    );
}

/// A script that reads a counter, spins, and writes it + 1 races plain INCRs from
/// other clients: no update is lost, because the script holds its key's shard for
/// its whole run. Meanwhile a client working on a key of another shard is served
/// while a (deliberately long) script still runs.
#[test]
fn a_script_is_atomic_on_its_keys_and_other_shards_keep_serving() {
    let s = TestServer::start();
    let port = s.port;
    let rmw = "local v = tonumber(redis.call('get', KEYS[1]) or '0') \
               for i = 1, 20000 do end \
               return redis.call('set', KEYS[1], v + 1)";
    let (scripts, incrs) = (150, 300);
    let mut threads = Vec::new();
    for _ in 0..2 {
        threads.push(std::thread::spawn(move || {
            let mut c = Conn::new(port);
            for _ in 0..scripts {
                assert_eq!(c.reply(&["EVAL", rmw, "1", "counter"]), "+OK\r\n");
            }
        }));
        threads.push(std::thread::spawn(move || {
            let mut c = Conn::new(port);
            for _ in 0..incrs {
                assert!(c.reply(&["INCR", "counter"]).starts_with(':'));
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    let mut c = Conn::new(port);
    let want = 2 * (scripts + incrs);
    assert_eq!(
        c.reply(&["GET", "counter"]),
        format!("${}\r\n{want}\r\n", want.to_string().len())
    );

    // A script spinning for seconds on `slow`. With a 1 ms threshold, a key that
    // shares its shard is answered BUSY at once instead of waiting, so the loop
    // below finds a key of another shard; that one must be served.
    let mut c = Conn::new(port);
    c.call(&["CONFIG", "SET", "busy-reply-threshold", "1"]);
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let long = std::thread::spawn(move || {
        let mut c = Conn::new(port);
        let r = c.reply(&[
            "EVAL",
            "for i = 1, 300000000 do end return redis.call('set', KEYS[1], 'x')",
            "1",
            "slow",
        ]);
        d.store(true, Ordering::SeqCst);
        r
    });
    std::thread::sleep(Duration::from_millis(200));
    let served = (0..64).find(|i| c.reply(&["SET", &format!("fast{i}"), "1"]) == "+OK\r\n");
    assert!(served.is_some(), "no key of another shard was served");
    assert!(
        !done.load(Ordering::SeqCst),
        "the long script finished before another shard's SET was answered"
    );
    assert_eq!(long.join().unwrap(), "+OK\r\n");
}

/// Scripts over two keys each (named in either order, so their shards are locked
/// in an order of their own), a script that may touch any key (and so holds every
/// shard), and plain INCRs, from six connections at once: every increment lands
/// exactly once and nothing waits for good. Running scripts are kept by shard, each
/// shard's list under its own lock; this is what their lock order and their
/// wake-ups must survive.
#[test]
fn scripts_over_some_shards_and_over_every_shard_run_side_by_side_exactly() {
    let s = TestServer::start();
    let port = s.port;
    // A spin between the read and the write, so that scripts overlap and wait
    // for each other rather than run one after another by chance.
    let each = "for _, k in ipairs(KEYS) do \
                local v = tonumber(redis.call('get', k) or '0') \
                for i = 1, 3000 do end \
                redis.call('set', k, v + 1) end return 1";
    let any = "#!lua flags=allow-undeclared-keys\n\
               for _, k in ipairs({'k1', 'k2', 'k3', 'k4'}) do redis.call('incr', k) end \
               return 1";
    let n = 300;
    let jobs: Vec<(Vec<&'static str>, usize)> = vec![
        (vec!["EVAL", each, "2", "k1", "k2"], n),
        (vec!["EVAL", each, "2", "k2", "k1"], n),
        (vec!["EVAL", each, "2", "k3", "k4"], n),
        (vec!["EVAL", each, "2", "k4", "k1"], n),
        (vec!["EVAL", any, "0"], n / 3),
        (vec!["INCR", "k3"], n),
    ];
    let threads: Vec<_> = jobs
        .into_iter()
        .map(|(args, times)| {
            std::thread::spawn(move || {
                let mut c = Conn::new(port);
                for _ in 0..times {
                    let r = c.reply(&args);
                    assert!(r.starts_with(':'), "{args:?}: {r}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut c = Conn::new(port);
    let any = n / 3;
    for (key, want) in [
        ("k1", 3 * n + any),
        ("k2", 2 * n + any),
        ("k3", 2 * n + any),
        ("k4", 2 * n + any),
    ] {
        assert_eq!(
            c.reply(&["GET", key]),
            format!("${}\r\n{want}\r\n", want.to_string().len()),
            "{key}"
        );
    }
    assert_eq!(
        c.reply(&["SCRIPT", "KILL"]),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
}

#[test]
fn busy_then_script_kill() {
    let s = TestServer::start();
    let port = s.port;
    let mut c = Conn::new(port);
    assert_eq!(
        c.reply(&["SCRIPT", "KILL"]),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );
    c.call(&["CONFIG", "SET", "busy-reply-threshold", "100"]);
    let spinner = std::thread::spawn(move || {
        let mut c = Conn::new(port);
        c.reply(&["EVAL", "local i = 0 while true do i = i + 1 end", "1", "k"])
    });
    // Until the script has run past the threshold, a GET of its key waits; after,
    // it is answered BUSY. A key-less command is served all along.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_eq!(c.reply(&["PING"]), "+PONG\r\n");
        let mut g = Conn::new(port);
        let r = g.reply(&["GET", "k"]);
        if r.starts_with("-BUSY") {
            assert_eq!(
                r,
                "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never BUSY: {r}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A script of another client on the held key is refused too, and counted so.
    assert!(c
        .reply(&["EVAL", "return 1", "1", "k"])
        .starts_with("-BUSY "));
    let stats = c.text(&["INFO", "commandstats"]);
    let eval = stats.lines().find(|l| l.starts_with("cmdstat_eval:"));
    assert!(
        eval.is_some_and(|l| l.ends_with(",rejected_calls=1,failed_calls=0")),
        "{stats}"
    );
    assert_eq!(c.reply(&["SCRIPT", "KILL"]), "+OK\r\n");
    let killed = spinner.join().unwrap();
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL... script: ")
            && killed.ends_with(", on @user_script:1.\r\n"),
        "{killed}"
    );
    assert_eq!(c.reply(&["GET", "k"]), "$-1\r\n");
    assert_eq!(
        c.reply(&["SCRIPT", "KILL"]),
        "-NOTBUSY No scripts in execution right now.\r\n"
    );

    // A script that may touch any key holds every shard, Redis's global lock: past
    // the threshold a GET of any key is answered BUSY, and so is a command that
    // names no key.
    let everywhere = "#!lua flags=allow-undeclared-keys\nlocal i = 0 while true do i = i + 1 end";
    let spinner = spin_until_busy(port, everywhere, &["GET", "any-key"]);
    assert!(c.reply(&["PING"]).starts_with("-BUSY "));
    assert_eq!(c.reply(&["SCRIPT", "KILL"]), "+OK\r\n");
    assert!(spinner
        .join()
        .unwrap()
        .starts_with("-ERR Script killed by user"));

    // A script that declares no key holds no shard: commands go on beside it, but
    // SCRIPT KILL finds it, and a command over the whole keyspace waits for it.
    let keyless = "local i = 0 while true do i = i + 1 end";
    let spinner = spin_until_busy(port, keyless, &["KEYS", "*"]);
    assert_eq!(c.reply(&["SET", "beside", "1"]), "+OK\r\n");
    assert_eq!(c.reply(&["PING"]), "+PONG\r\n");
    assert_eq!(c.reply(&["SCRIPT", "KILL"]), "+OK\r\n");
    assert!(spinner
        .join()
        .unwrap()
        .starts_with("-ERR Script killed by user"));

    // A script that wrote cannot be killed: it runs to its end.
    let writer = std::thread::spawn(move || {
        let mut c = Conn::new(port);
        c.reply(&[
            "EVAL",
            "redis.call('set', KEYS[1], 'w') for i = 1, 200000000 do end return 1",
            "1",
            "k",
        ])
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c.reply(&["SCRIPT", "KILL"]);
        if r.starts_with("-UNKILLABLE") {
            assert!(
                r.starts_with("-UNKILLABLE Sorry the script already executed write commands"),
                "{r}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never UNKILLABLE: {r}");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(writer.join().unwrap(), ":1\r\n");
    assert_eq!(c.reply(&["GET", "k"]), "$1\r\nw\r\n");
}

/// Starts `body`, a script declaring no key, from a thread of its own, and returns
/// once `probe` from another connection is answered BUSY; the thread returns the
/// script's reply.
fn spin_until_busy(
    port: u16,
    body: &'static str,
    probe: &[&str],
) -> std::thread::JoinHandle<String> {
    let h = std::thread::spawn(move || Conn::new(port).reply(&["EVAL", body, "0"]));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Conn::new(port).reply(probe).starts_with("-BUSY ") {
        assert!(Instant::now() < deadline, "{probe:?} never BUSY");
        std::thread::sleep(Duration::from_millis(50));
    }
    h
}

/// Starts `body` on key `k` from a thread of its own and returns once it runs;
/// the thread returns the script's reply.
fn spin(port: u16, body: &'static str) -> std::thread::JoinHandle<String> {
    let h = std::thread::spawn(move || Conn::new(port).reply(&["EVAL", body, "1", "k"]));
    let mut c = Conn::new(port);
    let deadline = Instant::now() + Duration::from_secs(30);
    // CLIENT LIST shows a connection's command from the moment it starts.
    while !c
        .reply(&["CLIENT", "LIST"])
        .lines()
        .any(|l| l.contains(" cmd=eval "))
    {
        assert!(Instant::now() < deadline, "the script never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    // CLIENT LIST shows eval a moment before the script holds its key (on a
    // loaded machine, maybe much more): with a zero threshold a GET of it is
    // answered BUSY exactly once it does.
    let threshold = c.reply(&["CONFIG", "GET", "busy-reply-threshold"]);
    let threshold = threshold
        .lines()
        .nth(4)
        .expect("CONFIG GET reply")
        .to_string();
    c.call(&["CONFIG", "SET", "busy-reply-threshold", "0"]);
    while !c.reply(&["GET", "k"]).starts_with("-BUSY ") {
        assert!(Instant::now() < deadline, "the script never held its key");
        std::thread::sleep(Duration::from_millis(10));
    }
    c.call(&["CONFIG", "SET", "busy-reply-threshold", &threshold]);
    h
}

/// SCRIPT KILL until it finds the script (a connection that ran one before may
/// still be listed while it closes).
fn kill(c: &mut Conn) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.reply(&["SCRIPT", "KILL"]).as_str() {
            "+OK\r\n" => return,
            "-NOTBUSY No scripts in execution right now.\r\n" => {}
            other => panic!("SCRIPT KILL: {other}"),
        }
        assert!(Instant::now() < deadline, "no script to kill");
        std::thread::sleep(Duration::from_millis(10));
    }
}

const KILLED: &str = "-ERR Script killed by user with SCRIPT KILL... script: ";

/// A script cannot catch its own kill: pcall, xpcall and coroutine.resume each
/// raise it again, so a script looping around any of them still stops.
#[test]
fn script_kill_cannot_be_caught() {
    let s = TestServer::start();
    let port = s.port;
    let mut c = Conn::new(port);
    c.call(&["CONFIG", "SET", "busy-reply-threshold", "50"]);
    for body in [
        "while true do pcall(function() while true do end end) end",
        "while true do xpcall(function() while true do end end, function(e) return e end) end",
        // Lua runs an xpcall handler with hooks off when the hook raises.
        "xpcall(function() while true do end end, function(e) while true do end end)",
        "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
        "while true do redis.pcall('get', KEYS[1]) pcall(error, 'x') end",
    ] {
        let h = spin(port, body);
        kill(&mut c);
        let r = h.join().unwrap();
        assert!(r.starts_with(KILLED), "{body}: {r}");
    }
    assert_eq!(c.reply(&["PING"]), "+PONG\r\n");
}

/// Commands waiting for a script's shard wait parked, off the runtime's workers:
/// with three times more waiters than workers, a PING and a key of another shard
/// are still answered while the script runs and the waiters wait; they are not
/// blocked clients; the kill lets them run.
#[test]
fn clients_waiting_for_a_script_hold_no_worker() {
    let s = TestServer::start_with(&["--threads", "2"]);
    let port = s.port;
    let mut c = Conn::new(port);
    // Long enough that no waiter turns BUSY during the test.
    c.call(&["CONFIG", "SET", "busy-reply-threshold", "600000"]);
    let h = spin(port, "while true do end");
    let mut waiters: Vec<TcpStream> = (0..6)
        .map(|_| {
            let mut w = TcpStream::connect(("127.0.0.1", port)).unwrap();
            w.write_all(&resp_cmd(&[b"GET", b"k"])).unwrap();
            w
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut other = Conn::new(port);
    assert_eq!(other.reply(&["PING"]), "+PONG\r\n");
    let served = (0..64).any(|i| other.reply(&["SET", &format!("other{i}"), "1"]) == "+OK\r\n");
    assert!(served, "no key of another shard was served");
    assert!(other
        .reply(&["INFO", "clients"])
        .contains("blocked_clients:0\r\n"));
    for w in &mut waiters {
        w.set_nonblocking(true).unwrap();
        let mut b = [0u8; 64];
        let r = w.read(&mut b);
        assert!(
            matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a waiter was answered while the script ran: {r:?}"
        );
        w.set_nonblocking(false).unwrap();
    }
    kill(&mut c);
    assert!(h.join().unwrap().starts_with(KILLED));
    for mut w in waiters {
        w.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        assert_eq!(harness::read_n(&mut w, 5), b"$-1\r\n");
    }
}

/// Past the threshold a command inside MULTI hears BUSY, and the transaction is
/// discarded at EXEC, as Redis flags it; before, queueing does not wait.
#[test]
fn busy_inside_multi_aborts_the_transaction() {
    let s = TestServer::start();
    let port = s.port;
    let mut c = Conn::new(port);
    c.call(&["CONFIG", "SET", "busy-reply-threshold", "0"]);
    let h = spin(port, "while true do end");
    let mut m = Conn::new(port);
    assert_eq!(m.reply(&["MULTI"]), "+OK\r\n");
    assert!(m.reply(&["GET", "k"]).starts_with("-BUSY "));
    assert_eq!(m.reply(&["PING"]), "+QUEUED\r\n");
    assert_eq!(
        m.reply(&["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    kill(&mut c);
    assert!(h.join().unwrap().starts_with(KILLED));

    // EXEC itself refused (its queued GET needs the script's shard): the
    // transaction ends, with the reason, as Redis's does.
    assert_eq!(m.reply(&["MULTI"]), "+OK\r\n");
    assert_eq!(m.reply(&["GET", "k"]), "+QUEUED\r\n");
    let h = spin(port, "while true do end");
    assert_eq!(
        m.reply(&["EXEC"]),
        "-EXECABORT Transaction discarded because of: BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
    );
    assert_eq!(m.reply(&["DISCARD"]), "-ERR DISCARD without MULTI\r\n");
    kill(&mut c);
    assert!(h.join().unwrap().starts_with(KILLED));

    c.call(&["CONFIG", "SET", "busy-reply-threshold", "600000"]);
    let h = spin(port, "while true do end");
    assert_eq!(m.reply(&["MULTI"]), "+OK\r\n");
    assert_eq!(m.reply(&["SET", "k", "v"]), "+QUEUED\r\n");
    m.s.write_all(&resp_cmd(&[b"EXEC"])).unwrap();
    kill(&mut c);
    assert!(h.join().unwrap().starts_with(KILLED));
    let mut buf = Vec::new();
    while parse_frame(&buf, &Limits::default()).unwrap().is_none() {
        let mut b = [0u8; 64];
        let n = m.s.read(&mut b).unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&b[..n]);
    }
    assert_eq!(buf, b"*1\r\n+OK\r\n", "EXEC ran once the script ended");
    assert_eq!(c.reply(&["GET", "k"]), "$1\r\nv\r\n");
}

/// Bytecode never runs: EVAL of a binary chunk and loadstring of string.dump's
/// output are syntax errors (checked byte for byte against Redis above), so the
/// function a dump holds is never called.
#[test]
fn bytecode_never_runs() {
    let s = TestServer::start();
    let mut c = Conn::new(s.port);
    let r = c.reply(&[
        "EVAL",
        "local f = loadstring(string.dump(function() return 'ran' end)) return f and f() or 'refused'",
        "0",
    ]);
    assert_eq!(r, "$7\r\nrefused\r\n");
}

/// SHUTDOWN waits for a running script and past the threshold answers BUSY, as
/// Redis does; SHUTDOWN NOSAVE stops it and exits.
#[test]
fn shutdown_nosave_ends_a_script_that_will_not() {
    let mut s = TestServer::start_with(&["--save", "900 1"]);
    let port = s.port;
    let mut c = Conn::new(port);
    c.call(&["CONFIG", "SET", "busy-reply-threshold", "100"]);
    let h = spin(port, "redis.call('set', KEYS[1], 'x') while true do end");
    // DBSIZE needs no shard: it sees the script's write before SCRIPT KILL is
    // asked (on a loaded machine the script may not have reached it yet).
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.reply(&["DBSIZE"]) != ":1\r\n" {
        assert!(Instant::now() < deadline, "the script never wrote");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(c.reply(&["SHUTDOWN"]).starts_with("-BUSY "));
    assert!(c.reply(&["SCRIPT", "KILL"]).starts_with("-UNKILLABLE "));
    c.s.write_all(&resp_cmd(&[b"SHUTDOWN", b"NOSAVE"])).unwrap();
    assert!(s.wait_exit(Duration::from_secs(20)).success());
    assert!(h.join().unwrap().starts_with(KILLED));
}

/// SIGTERM stops a script that will not end, written or not.
#[test]
fn sigterm_ends_a_script_that_will_not() {
    let s = TestServer::start();
    let h = spin(s.port, "redis.call('set', KEYS[1], 'x') while true do end");
    assert!(s.terminate().success());
    let r = h.join().unwrap();
    assert!(r.starts_with(KILLED), "{r}");
}

/// With one loop, every client shares the loop of a script that never ends: the
/// thread running the script hands the loop to another (`evloop::hand_over`),
/// so the others are answered (BUSY for a key the script may touch) and SCRIPT
/// KILL gets through. Without the hand-over, the first PING would never be
/// answered.
#[test]
fn a_busy_script_hands_its_loop_to_the_other_clients() {
    let s = TestServer::start_with(&["--threads", "1"]);
    let port = s.port;
    let mut c = Conn::new(port);
    c.call(&["CONFIG", "SET", "busy-reply-threshold", "100"]);
    let spinner = std::thread::spawn(move || {
        let mut c = Conn::new(port);
        let reply = c.reply(&["EVAL", "while true do end", "1", "k"]);
        (c, reply)
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert_eq!(c.reply(&["PING"]), "+PONG\r\n");
        if c.reply(&["GET", "k"]).starts_with("-BUSY ") {
            break;
        }
        assert!(Instant::now() < deadline, "never BUSY");
        std::thread::sleep(Duration::from_millis(20));
    }
    // New connections are served too, on the loop's new thread.
    let mut late = Conn::new(port);
    assert_eq!(late.reply(&["PING"]), "+PONG\r\n");
    assert_eq!(c.reply(&["SCRIPT", "KILL"]), "+OK\r\n");
    let (mut spun, killed) = spinner.join().unwrap();
    assert!(killed.starts_with("-ERR Script killed by user"), "{killed}");
    // The script's connection is back on the loop, with everyone else.
    assert_eq!(spun.reply(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(c.reply(&["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(late.reply(&["GET", "k"]), "$1\r\nv\r\n");
}

/// A script runs on its connection's loop, so a short one costs no thread
/// hand-over; work that is long in one step (a value of megabytes copied into or
/// out of Lua, a big `string.rep`, a string doubled by `..`) starts with a big
/// allocation, which lets the loop go on without it first, so with one loop
/// another client's PING is answered while it runs.
#[test]
fn a_script_s_big_steps_hold_up_no_other_client() {
    let s = TestServer::start_with(&["--threads", "1"]);
    let mut c = Conn::new(s.port);
    assert_eq!(c.reply(&["EVAL", "return 1", "0"]), ":1\r\n");
    // Each ends with a collection, so that the hundreds of MB its strings took
    // are not still held when the next one runs.
    let big = "local n = #string.rep('x', 200000000) collectgarbage() return n";
    let set = "local r = redis.call('SET', KEYS[1], string.rep('y', 200000000)) collectgarbage() return r";
    let get = "local n = #redis.call('GET', KEYS[1]) collectgarbage() return n";
    // A string doubled 27 times: 27 steps, each long in one go.
    let doubled = "local s = 'x' for i = 1, 27 do s = s .. s end collectgarbage() return #s";
    for (body, keys, expected) in [
        (big, &[][..], ":200000000\r\n"),
        (doubled, &[][..], ":134217728\r\n"),
        (set, &["big"][..], "+OK\r\n"),
        (get, &["big"][..], ":200000000\r\n"),
    ] {
        let n = keys.len().to_string();
        let mut args: Vec<&[u8]> = vec![b"EVAL", body.as_bytes(), n.as_bytes()];
        args.extend(keys.iter().map(|k| k.as_bytes()));
        // The big step takes tens of ms.
        let mut heavy = harness::ping_answered_during(s.port, &args, Duration::from_millis(5));
        let mut reply = vec![0u8; expected.len()];
        heavy.read_exact(&mut reply).unwrap();
        assert_eq!(String::from_utf8_lossy(&reply), expected, "{body}");
    }
    // The script's connection came back to the loop; scripts still run in place.
    assert_eq!(
        c.reply(&["EVAL", "return redis.call('STRLEN', KEYS[1])", "1", "big"]),
        ":200000000\r\n"
    );
}

/// The connections on each loop, from `INFO loops`.
fn loop_connections(c: &mut Conn) -> Vec<u64> {
    harness::loop_connections(&c.reply(&["INFO", "loops"]))
}

/// Pipelines batches of 16 EVALs of `body` over `key` on `c` until `stop`
/// (or `batches` of them), checking that each reply is above the one before
/// (the script INCRs the key): how many scripts ran.
fn incr_scripts(c: &mut Conn, body: &str, key: &str, stop: &AtomicBool, batches: usize) -> u64 {
    let (mut last, mut ran) = (0, 0);
    for _ in 0..batches {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        for _ in 0..16 {
            c.send(&["EVAL", body, "1", key]);
        }
        for _ in 0..16 {
            match c.frame() {
                relcache_protocol::resp::Frame::Integer(v) => {
                    assert!(v > last, "{v} after {last}: a reply lost or out of order");
                    last = v;
                }
                other => panic!("EVAL answered {other:?}"),
            }
            ran += 1;
        }
    }
    ran
}

/// The loop `ctl` is on, once it is the only connection left (one closed a
/// moment ago may still be counted).
fn only_connection_s_loop(ctl: &mut Conn) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let conns = loop_connections(ctl);
        if conns.iter().sum::<u64>() == 1 {
            return conns.iter().position(|&n| n == 1).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "{conns:?} connections, one expected"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Four connections, each on a thread of its own, running scripts that INCR
/// `key` until `stop` or `batches`; each RESP3 and subscribed to `news<i>`.
fn script_workers(
    port: u16,
    key: &'static str,
    stop: &Arc<AtomicBool>,
    batches: usize,
) -> Vec<std::thread::JoinHandle<(Conn, u64)>> {
    // A spin after the INCR holds the key long enough for the other loop's
    // scripts to find it held.
    let body = "local v = redis.call('incr', KEYS[1]) for i = 1, 3000 do end return v";
    (0..4)
        .map(|i| {
            let mut c = Conn::new(port);
            // Its message queue must signal whichever loop it lives on.
            assert!(c.reply(&["HELLO", "3"]).starts_with('%'));
            assert!(c
                .text(&["SUBSCRIBE", &format!("news{i}")])
                .contains("subscribe"));
            let stop = stop.clone();
            std::thread::spawn(move || {
                let ran = incr_scripts(&mut c, body, key, &stop, batches);
                (c, ran)
            })
        })
        .collect()
}

/// Joins `workers`: their connections, and how many scripts they ran.
fn join_workers(workers: Vec<std::thread::JoinHandle<(Conn, u64)>>) -> (Vec<Conn>, u64) {
    let mut ran = 0;
    let conns = workers
        .into_iter()
        .map(|w| {
            let (c, n) = w.join().unwrap();
            ran += n;
            c
        })
        .collect();
    (conns, ran)
}

/// Connections whose scripts keep waiting for another loop's scripts over one
/// key move, between two passes, to the loop that key calls home
/// (`script::affinity`): with `script-loop-affinity no` four such connections
/// stay spread over both loops; with it on (the default) they end on one, and
/// in both every pipelined reply came in order, the key's total is exact, and
/// a subscription made before a move is served after it.
#[test]
fn script_connections_move_to_their_key_s_loop_and_lose_nothing() {
    // Spread, as under a load that fills one loop (`gather`).
    let s = TestServer::start_with(&[
        "--threads",
        "2",
        "--script-loop-affinity",
        "no",
        "--loop-gather-below",
        "0",
    ]);
    let port = s.port;
    let mut ctl = Conn::new(port);
    only_connection_s_loop(&mut ctl);
    let moves = |ctl: &mut Conn| {
        harness::info_value::<u64>(&ctl.reply(&["INFO", "loops"]), "connection_moves")
    };

    // Off: spread by fewest connections, and there they stay.
    let never = Arc::new(AtomicBool::new(false));
    let (conns, ran) = join_workers(script_workers(port, "cold", &never, 40));
    assert_eq!(
        ctl.reply(&["GET", "cold"]),
        format!("${}\r\n{ran}\r\n", ran.to_string().len())
    );
    assert_eq!(moves(&mut ctl), 0);
    let spread = loop_connections(&mut ctl);
    assert!(spread.iter().all(|&n| n <= 3), "{spread:?}");
    drop(conns);
    let mine = only_connection_s_loop(&mut ctl);

    // On: the same four gather on the key's loop.
    assert_eq!(
        ctl.reply(&["CONFIG", "SET", "script-loop-affinity", "yes"]),
        "+OK\r\n"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let workers = script_workers(port, "hot", &stop, usize::MAX);
    let deadline = Instant::now() + Duration::from_secs(60);
    let gathered = loop {
        let mut conns = loop_connections(&mut ctl);
        conns[mine] -= 1;
        if conns.contains(&4) {
            break conns;
        }
        assert!(Instant::now() < deadline, "never gathered: {conns:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    stop.store(true, Ordering::Relaxed);
    let (mut conns, ran) = join_workers(workers);
    let moved = moves(&mut ctl);
    assert!(
        (1..=4).contains(&moved),
        "{moved} moves, loops {gathered:?}"
    );
    assert_eq!(
        ctl.reply(&["GET", "hot"]),
        format!("${}\r\n{ran}\r\n", ran.to_string().len())
    );
    for (i, c) in conns.iter_mut().enumerate() {
        let channel = format!("news{i}");
        assert_eq!(ctl.reply(&["PUBLISH", &channel, "after"]), ":1\r\n");
        let pushed = format!("{:?}", c.frame());
        assert!(
            pushed.contains(&channel) && pushed.contains("after"),
            "{pushed}"
        );
    }
}
