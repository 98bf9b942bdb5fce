//! End-to-end tests of the connection commands (PING, ECHO, QUIT, SELECT, AUTH,
//! HELLO, RESET, CLIENT …) and of COMMAND introspection, against the real binary,
//! with exact wire replies in RESP2 and RESP3.

mod harness;

use std::io::Write;
use std::net::TcpStream;

use bytes::Bytes;
use harness::{read_to_end, resp_cmd, roundtrip, ReadEnd, TestServer};
use relcache_protocol::resp::{parse_frame, Frame, Limits};

/// A raw connection that sends commands and parses one reply at a time.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    fn new(srv: &TestServer) -> Raw {
        Raw {
            s: srv.raw(),
            buf: Vec::new(),
        }
    }

    fn send(&mut self, args: &[&str]) {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.s.write_all(&resp_cmd(&args)).unwrap();
    }

    /// The next reply's bytes, exactly as sent.
    fn reply_bytes(&mut self) -> Vec<u8> {
        use std::io::Read;
        loop {
            if let Some((_, n)) = parse_frame(&self.buf, &Limits::default()).expect("valid RESP") {
                return self.buf.drain(..n).collect();
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.s.read(&mut chunk).expect("read a reply");
            assert!(
                n > 0,
                "EOF while waiting for a reply; have {:?}",
                String::from_utf8_lossy(&self.buf)
            );
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn reply(&mut self) -> Frame {
        let bytes = self.reply_bytes();
        parse_frame(&bytes, &Limits::default()).unwrap().unwrap().0
    }

    fn call(&mut self, args: &[&str]) -> Frame {
        self.send(args);
        self.reply()
    }

    /// The exact wire reply, as text.
    fn wire(&mut self, args: &[&str]) -> String {
        self.send(args);
        String::from_utf8(self.reply_bytes()).unwrap()
    }

    /// Whether the server has closed this connection (it reads EOF or a reset).
    fn closed(&mut self) -> bool {
        matches!(read_to_end(&mut self.s).1, ReadEnd::Eof | ReadEnd::Reset)
    }
}

fn bulk(s: &str) -> Frame {
    Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn text(f: &Frame) -> String {
    match f {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) => {
            String::from_utf8_lossy(b).into_owned()
        }
        Frame::Verbatim { text, .. } => String::from_utf8_lossy(text).into_owned(),
        other => panic!("not a string reply: {other:?}"),
    }
}

fn int(f: &Frame) -> i64 {
    match f {
        Frame::Integer(n) => *n,
        other => panic!("not an integer: {other:?}"),
    }
}

fn items(f: &Frame) -> &[Frame] {
    match f {
        Frame::Array(v) | Frame::Set(v) => v,
        other => panic!("not an aggregate: {other:?}"),
    }
}

/// A map reply's value for `key` (RESP3 map, or a RESP2 flat array of pairs).
fn field<'a>(f: &'a Frame, key: &str) -> Option<&'a Frame> {
    match f {
        Frame::Map(pairs) => pairs.iter().find(|(k, _)| text(k) == key).map(|(_, v)| v),
        Frame::Array(v) => v.chunks(2).find(|p| text(&p[0]) == key).map(|p| &p[1]),
        other => panic!("not a map: {other:?}"),
    }
}

fn names(f: &Frame) -> Vec<String> {
    items(f).iter().map(text).collect()
}

#[test]
fn ping_echo_select_quit() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    assert_eq!(c.wire(&["PING"]), "+PONG\r\n");
    assert_eq!(c.wire(&["ping", "hello world"]), "$11\r\nhello world\r\n");
    assert_eq!(
        c.wire(&["PING", "a", "b"]),
        "-ERR wrong number of arguments for 'ping' command\r\n"
    );
    assert_eq!(c.wire(&["ECHO", "x\r\ny"]), "$4\r\nx\r\ny\r\n");
    assert_eq!(
        c.wire(&["ECHO"]),
        "-ERR wrong number of arguments for 'echo' command\r\n"
    );
    assert_eq!(c.wire(&["SELECT", "0"]), "+OK\r\n");
    assert_eq!(
        c.wire(&["SELECT", "1"]),
        "-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        c.wire(&["SELECT", "-1"]),
        "-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        c.wire(&["SELECT", "x"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        c.wire(&["SELECT", "99999999999"]),
        "-ERR value is out of range, value must between -2147483648 and 2147483647\r\n"
    );
    assert_eq!(
        c.wire(&["FOO", "x"]),
        "-ERR unknown command 'FOO', with args beginning with: 'x' \r\n"
    );
    // QUIT answers, then closes; a command pipelined after it is never run.
    let mut quit = resp_cmd(&[b"QUIT"]);
    quit.extend(resp_cmd(&[b"PING"]));
    c.s.write_all(&quit).unwrap();
    let (got, end) = read_to_end(&mut c.s);
    assert_eq!(String::from_utf8_lossy(&got), "+OK\r\n");
    assert_eq!(end, ReadEnd::Eof);
}

/// Each request is resolved by its own name, however the one before it was: the
/// connection's remembered last command must never answer for another (a
/// container and its subcommands, a different case, a wrong arity).
#[test]
fn every_request_runs_the_command_it_names() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    assert_eq!(c.wire(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(c.wire(&["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(c.wire(&["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(c.wire(&["get", "k"]), "$1\r\nv\r\n");
    assert_eq!(c.wire(&["GeT", "k"]), "$1\r\nv\r\n");
    assert_eq!(
        c.wire(&["GET"]),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(c.wire(&["GET", "k"]), "$1\r\nv\r\n");
    assert_eq!(c.wire(&["GETSET", "k", "w"]), "$1\r\nv\r\n");
    assert_eq!(c.wire(&["GETSET", "k", "v"]), "$1\r\nw\r\n");
    assert_eq!(c.wire(&["CONFIG", "SET", "hz", "11"]), "+OK\r\n");
    assert_eq!(
        c.wire(&["CONFIG", "GET", "hz"]),
        "*2\r\n$2\r\nhz\r\n$2\r\n11\r\n"
    );
    assert_eq!(c.wire(&["CONFIG", "SET", "hz", "10"]), "+OK\r\n");
    assert_eq!(
        c.wire(&["CONFIG"]),
        "-ERR wrong number of arguments for 'config' command\r\n"
    );
    assert_eq!(
        c.wire(&["CONFIG", "GET", "hz"]),
        "*2\r\n$2\r\nhz\r\n$2\r\n10\r\n"
    );
    assert_eq!(c.wire(&["GET", "k"]), "$1\r\nv\r\n");
    // An unknown name is never remembered, however long.
    for _ in 0..2 {
        assert_eq!(
            c.wire(&["NOSUCHCOMMANDWITHALONGNAME", "k"]),
            "-ERR unknown command 'NOSUCHCOMMANDWITHALONGNAME', with args beginning with: 'k' \r\n"
        );
    }
    assert_eq!(c.wire(&["IDSET.MEXISTSBIN", "nokey", ""]), "$-1\r\n");
    assert_eq!(c.wire(&["GET", "k"]), "$1\r\nv\r\n");
}

#[test]
fn auth_without_a_password() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    assert_eq!(
        c.wire(&["AUTH", "x"]),
        "-ERR AUTH <password> called without any password configured for the default user. \
         Are you sure your configuration is correct?\r\n"
    );
    // The default user is nopass: any password is accepted for it, no other user exists.
    assert_eq!(c.wire(&["AUTH", "default", "anything"]), "+OK\r\n");
    assert_eq!(
        c.wire(&["AUTH", "bob", "x"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(c.wire(&["AUTH", "a", "b", "c"]), "-ERR syntax error\r\n");
    assert_eq!(
        c.wire(&["AUTH"]),
        "-ERR wrong number of arguments for 'auth' command\r\n"
    );
}

#[test]
fn requirepass_gates_everything_but_auth_hello_quit_reset() {
    let srv = TestServer::start_with(&["--requirepass", "secret"]);
    let mut c = Raw::new(&srv);
    assert_eq!(
        c.wire(&["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(c.wire(&["PING"]), "-NOAUTH Authentication required.\r\n");
    assert_eq!(
        c.wire(&["CLIENT", "ID"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(
        c.wire(&["AUTH", "wrong"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        c.wire(&["AUTH", "default", "wrong"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        c.wire(&["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );
    let hello = c.wire(&["HELLO", "3"]);
    assert!(
        hello.starts_with("-NOAUTH HELLO must be called with the client already authenticated"),
        "{hello}"
    );
    assert_eq!(c.wire(&["RESET"]), "+RESET\r\n");
    assert_eq!(c.wire(&["AUTH", "secret"]), "+OK\r\n");
    assert_eq!(c.wire(&["GET", "k"]), "$-1\r\n");
    // RESET forgets the authentication when a password is set.
    assert_eq!(c.wire(&["RESET"]), "+RESET\r\n");
    assert_eq!(
        c.wire(&["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(c.wire(&["AUTH", "default", "secret"]), "+OK\r\n");
    assert_eq!(c.wire(&["GET", "k"]), "$-1\r\n");

    // HELLO 3 AUTH authenticates and switches protocol in one step.
    let mut h = Raw::new(&srv);
    let reply = h.wire(&["HELLO", "3", "AUTH", "default", "secret", "SETNAME", "svc"]);
    assert!(
        reply.starts_with("%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n"),
        "{reply}"
    );
    assert_eq!(h.wire(&["GET", "k"]), "_\r\n");
    assert_eq!(h.wire(&["CLIENT", "GETNAME"]), "$3\r\nsvc\r\n");
    let mut bad = Raw::new(&srv);
    assert_eq!(
        bad.wire(&["HELLO", "3", "AUTH", "default", "nope"]),
        "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    assert_eq!(
        bad.wire(&["GET", "k"]),
        "-NOAUTH Authentication required.\r\n"
    );

    // Real clients: the redis crate with a password in the URL, redis-cli with -a.
    let url = format!("redis://:secret@127.0.0.1:{}/", srv.port);
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(
        srv.cli_out(&["--no-auth-warning", "-a", "secret", "PING"]),
        "PONG"
    );
    assert!(srv.cli_out(&["PING"]).contains("NOAUTH"));
}

#[test]
fn hello_negotiates_the_protocol() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    let id = int(&c.call(&["CLIENT", "ID"]));
    let version = relcache_server::REDIS_VERSION;
    // Without arguments: the current context, protocol unchanged (RESP2: a flat array).
    let info = c.call(&["HELLO"]);
    assert_eq!(items(&info).len(), 14);
    assert_eq!(field(&info, "proto"), Some(&Frame::Integer(2)));
    let expected = format!(
        "%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n${}\r\n{version}\r\n$5\r\nproto\r\n:3\r\n\
         $2\r\nid\r\n:{id}\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n\
         $7\r\nmodules\r\n*0\r\n",
        version.len()
    );
    assert_eq!(c.wire(&["HELLO", "3"]), expected);
    assert_eq!(c.wire(&["GET", "missing"]), "_\r\n");
    let info = c.call(&["CLIENT", "INFO"]);
    assert!(
        matches!(&info, Frame::Verbatim { format, .. } if format == b"txt"),
        "{info:?}"
    );
    assert!(text(&info).contains(" resp=3 "), "{info:?}");
    assert!(c.wire(&["HELLO", "2"]).starts_with("*14\r\n"));
    assert_eq!(c.wire(&["GET", "missing"]), "$-1\r\n");

    assert_eq!(
        c.wire(&["HELLO", "4"]),
        "-NOPROTO unsupported protocol version\r\n"
    );
    assert_eq!(
        c.wire(&["HELLO", "1"]),
        "-NOPROTO unsupported protocol version\r\n"
    );
    assert_eq!(
        c.wire(&["HELLO", "x"]),
        "-ERR Protocol version is not an integer or out of range\r\n"
    );
    assert_eq!(
        c.wire(&["HELLO", "3", "FOO"]),
        "-ERR Syntax error in HELLO option 'FOO'\r\n"
    );
    assert_eq!(
        c.wire(&["HELLO", "3", "AUTH", "default"]),
        "-ERR Syntax error in HELLO option 'AUTH'\r\n"
    );
    assert_eq!(
        c.wire(&["HELLO", "3", "SETNAME", "a b"]),
        "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    // A failed HELLO changes nothing.
    assert_eq!(c.wire(&["GET", "missing"]), "$-1\r\n");
    let info = c.call(&["HELLO", "2", "SETNAME", "named"]);
    assert_eq!(field(&info, "id"), Some(&Frame::Integer(id)));
    assert_eq!(c.wire(&["CLIENT", "GETNAME"]), "$5\r\nnamed\r\n");
}

#[test]
fn resp3_through_the_redis_crate() {
    let srv = TestServer::start();
    let client = redis::Client::open(format!("{}?protocol=resp3", srv.url())).unwrap();
    let mut con = client.get_connection().unwrap();
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut con).unwrap();
    assert!(info.contains(" resp=3 "), "{info}");
}

#[test]
fn reset_returns_the_connection_to_its_initial_state() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    let mut other = srv.conn();
    assert_eq!(
        c.wire(&["HELLO", "3", "SETNAME", "before"]).get(..2),
        Some("%7")
    );
    assert_eq!(c.wire(&["WATCH", "w"]), "+OK\r\n");
    assert_eq!(c.wire(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.wire(&["SET", "k", "v"]), "+QUEUED\r\n");
    assert_eq!(c.wire(&["RESET"]), "+RESET\r\n");
    // Out of MULTI (the SET was dropped), back in RESP2, nameless.
    assert_eq!(c.wire(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(c.wire(&["GET", "k"]), "$-1\r\n");
    assert_eq!(c.wire(&["CLIENT", "GETNAME"]), "$-1\r\n");
    // The WATCH is gone: a change to `w` no longer aborts a transaction.
    let _: () = redis::cmd("SET")
        .arg("w")
        .arg("1")
        .query(&mut other)
        .unwrap();
    assert_eq!(c.wire(&["MULTI"]), "+OK\r\n");
    assert_eq!(c.wire(&["GET", "w"]), "+QUEUED\r\n");
    assert_eq!(c.wire(&["EXEC"]), "*1\r\n$1\r\n1\r\n");
}

#[test]
fn client_names_ids_and_list() {
    let srv = TestServer::start();
    let mut a = Raw::new(&srv);
    let mut b = Raw::new(&srv);
    let name_err = "-ERR Client names cannot contain spaces, newlines or special characters.\r\n";
    assert_eq!(a.wire(&["CLIENT", "SETNAME", "has space"]), name_err);
    assert_eq!(a.wire(&["CLIENT", "SETNAME", "new\nline"]), name_err);
    assert_eq!(a.wire(&["CLIENT", "SETNAME", "caf\u{e9}"]), name_err);
    assert_eq!(a.wire(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(a.wire(&["CLIENT", "SETNAME", "worker-1"]), "+OK\r\n");
    assert_eq!(a.wire(&["CLIENT", "GETNAME"]), "$8\r\nworker-1\r\n");
    assert_eq!(
        a.wire(&["CLIENT", "SETNAME"]),
        "-ERR wrong number of arguments for 'client|setname' command\r\n"
    );
    assert_eq!(
        a.wire(&["CLIENT", "NOPE"]),
        "-ERR unknown subcommand 'NOPE'. Try CLIENT HELP.\r\n"
    );
    assert_eq!(
        a.wire(&["CLIENT"]),
        "-ERR wrong number of arguments for 'client' command\r\n"
    );

    let a_id = int(&a.call(&["CLIENT", "ID"]));
    let b_id = int(&b.call(&["CLIENT", "ID"]));
    assert_ne!(a_id, b_id);
    let info = text(&a.call(&["CLIENT", "INFO"]));
    assert!(
        info.starts_with(&format!("id={a_id} addr=127.0.0.1:")),
        "{info}"
    );
    assert!(
        info.contains(" name=worker-1 ")
            && info.contains(" cmd=client|info ")
            && info.ends_with('\n'),
        "{info}"
    );

    // Another connection sees the name in CLIENT LIST, one line per client.
    // Only this test's two connections are counted: the harness's readiness probe
    // may still be listed for a moment after it hung up.
    let ours = |list: &str| -> Vec<String> {
        list.lines()
            .filter(|l| {
                l.starts_with(&format!("id={a_id} ")) || l.starts_with(&format!("id={b_id} "))
            })
            .map(str::to_string)
            .collect()
    };
    let list = text(&b.call(&["CLIENT", "LIST"]));
    assert!(list.lines().all(|l| l.starts_with("id=")), "{list}");
    let lines = ours(&list);
    assert_eq!(lines.len(), 2, "{list}");
    let a_line = lines
        .iter()
        .find(|l| l.starts_with(&format!("id={a_id} ")))
        .expect("a is listed");
    assert!(a_line.contains(" name=worker-1 "), "{a_line}");
    let only_b = text(&a.call(&["CLIENT", "LIST", "ID", &b_id.to_string(), "999999"]));
    assert!(
        only_b.starts_with(&format!("id={b_id} ")) && only_b.lines().count() == 1,
        "{only_b}"
    );
    assert_eq!(
        ours(&text(&a.call(&["CLIENT", "LIST", "TYPE", "normal"]))).len(),
        2
    );
    assert_eq!(a.wire(&["CLIENT", "LIST", "TYPE", "pubsub"]), "$0\r\n\r\n");
    assert_eq!(
        a.wire(&["CLIENT", "LIST", "TYPE", "bogus"]),
        "-ERR Unknown client type 'bogus'\r\n"
    );
    assert_eq!(
        a.wire(&["CLIENT", "LIST", "ID", "x"]),
        "-ERR Invalid client ID\r\n"
    );
    assert_eq!(a.wire(&["CLIENT", "LIST", "FOO"]), "-ERR syntax error\r\n");

    // An empty name clears it.
    assert_eq!(a.wire(&["CLIENT", "SETNAME", ""]), "+OK\r\n");
    assert_eq!(a.wire(&["CLIENT", "GETNAME"]), "$-1\r\n");

    // RESP3: CLIENT LIST is a verbatim string.
    a.call(&["HELLO", "3"]);
    assert!(a.wire(&["CLIENT", "LIST"]).starts_with('='));
}

#[test]
fn client_setinfo_and_modes() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    assert_eq!(
        c.wire(&["CLIENT", "SETINFO", "LIB-NAME", "relcache-test"]),
        "+OK\r\n"
    );
    assert_eq!(
        c.wire(&["CLIENT", "SETINFO", "lib-ver", "1.2.3"]),
        "+OK\r\n"
    );
    let info = text(&c.call(&["CLIENT", "INFO"]));
    assert!(
        info.contains(" lib-name=relcache-test lib-ver=1.2.3"),
        "{info}"
    );
    assert_eq!(
        c.wire(&["CLIENT", "SETINFO", "color", "red"]),
        "-ERR Unrecognized option 'color'\r\n"
    );
    assert_eq!(
        c.wire(&["CLIENT", "SETINFO", "lib-name", "two words"]),
        "-ERR lib-name cannot contain spaces, newlines or special characters.\r\n"
    );
    assert_eq!(
        c.wire(&["CLIENT", "SETINFO", "lib-name"]),
        "-ERR wrong number of arguments for 'client|setinfo' command\r\n"
    );
    assert_eq!(c.wire(&["CLIENT", "SETINFO", "lib-ver", ""]), "+OK\r\n");
    assert!(text(&c.call(&["CLIENT", "INFO"])).contains(" lib-ver=\n"));
    for mode in ["NO-EVICT", "NO-TOUCH"] {
        assert_eq!(c.wire(&["CLIENT", mode, "on"]), "+OK\r\n");
        assert_eq!(c.wire(&["CLIENT", mode, "OFF"]), "+OK\r\n");
        assert_eq!(c.wire(&["CLIENT", mode, "maybe"]), "-ERR syntax error\r\n");
    }
    let help = c.call(&["CLIENT", "HELP"]);
    let lines = names(&help);
    assert_eq!(
        lines[0],
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    );
    assert!(lines.iter().any(|l| l.starts_with("SETNAME")));
    assert_eq!(lines.last().unwrap(), "    Prints this help.");
}

#[test]
fn client_kill_disconnects_others_and_keeps_the_killer() {
    let srv = TestServer::start();
    let mut killer = Raw::new(&srv);
    let mut victim = Raw::new(&srv);
    let victim_id = int(&victim.call(&["CLIENT", "ID"]));
    let my_id = int(&killer.call(&["CLIENT", "ID"]));

    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "ID", &victim_id.to_string()]),
        ":1\r\n"
    );
    assert!(victim.closed(), "the killed connection reads EOF");
    assert_eq!(killer.wire(&["PING"]), "+PONG\r\n");

    // The old form, by address: +OK, or an error when nobody is there.
    let mut old = Raw::new(&srv);
    let info = text(&old.call(&["CLIENT", "INFO"]));
    let addr = info
        .split(' ')
        .find_map(|f| f.strip_prefix("addr="))
        .unwrap()
        .to_string();
    assert_eq!(killer.wire(&["CLIENT", "KILL", &addr]), "+OK\r\n");
    assert!(old.closed());
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "1.2.3.4:5"]),
        "-ERR No such client\r\n"
    );

    // Filters: the caller is skipped unless SKIPME no.
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "ID", &my_id.to_string()]),
        ":0\r\n"
    );
    let mut third = Raw::new(&srv);
    third.call(&["PING"]);
    // LADDR matches every client, so first let the connections that already hung up
    // (the harness's readiness probe, the one killed above) finish unregistering.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while text(&killer.call(&["CLIENT", "LIST"])).lines().count() != 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "stale clients stay listed"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let laddr = format!("127.0.0.1:{}", srv.port);
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "LADDR", &laddr, "USER", "default"]),
        ":1\r\n"
    );
    assert!(third.closed());
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "ID", "0"]),
        "-ERR client-id should be greater than 0\r\n"
    );
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "ID", "x"]),
        "-ERR client-id should be greater than 0\r\n"
    );
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "TYPE", "bogus"]),
        "-ERR Unknown client type 'bogus'\r\n"
    );
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "USER", "bob"]),
        "-ERR No such user 'bob'\r\n"
    );
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "SKIPME", "maybe"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "ID", "1", "SKIPME"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "FOO", "bar"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(killer.wire(&["CLIENT", "KILL", "TYPE", "master"]), ":0\r\n");
    assert_eq!(killer.wire(&["PING"]), "+PONG\r\n");

    // SKIPME no: the reply still arrives, then the connection closes.
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "ID", &my_id.to_string(), "SKIPME", "no"]),
        ":1\r\n"
    );
    assert!(killer.closed());
}

/// A CLIENT LIST / CLIENT INFO line's field `name`.
fn client_field(line: &str, name: &str) -> String {
    line.split(' ')
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
        .to_string()
}

fn info_num(con: &mut Raw, name: &str) -> u64 {
    harness::info_value(&text(&con.call(&["INFO"])), name)
}

/// `timeout` closes a client that has sent nothing for that long, and only it: a
/// subscriber and a MONITOR wait for the server, not it for them, and stay, as in
/// Redis. CLIENT LIST's `idle` counts the seconds since a client's last input.
#[test]
fn idle_timeout_closes_only_idle_clients() {
    use std::time::{Duration, Instant};
    let srv = TestServer::start();
    let mut busy = Raw::new(&srv);
    assert_eq!(busy.wire(&["CONFIG", "SET", "timeout", "3"]), "+OK\r\n");
    let mut idle = Raw::new(&srv);
    let idle_id = int(&idle.call(&["CLIENT", "ID"])).to_string();
    let mut subscriber = Raw::new(&srv);
    subscriber.call(&["SUBSCRIBE", "news"]);
    let mut monitor = Raw::new(&srv);
    assert_eq!(monitor.wire(&["MONITOR"]), "+OK\r\n");
    let busy_id = int(&busy.call(&["CLIENT", "ID"])).to_string();
    let started = Instant::now();
    let keep_busy = |busy: &mut Raw, until: Duration| {
        while started.elapsed() < until {
            assert_eq!(busy.wire(&["PING"]), "+PONG\r\n");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    keep_busy(&mut busy, Duration::from_millis(1_500));
    let list = text(&busy.call(&["CLIENT", "LIST"]));
    let line_of = |id: &str| {
        list.lines()
            .find(|l| client_field(l, "id") == id)
            .unwrap_or_else(|| panic!("client {id} not in {list}"))
            .to_string()
    };
    let idle_secs: u64 = client_field(&line_of(&idle_id), "idle").parse().unwrap();
    assert!(
        (1..3).contains(&idle_secs),
        "idle for about 1.5 s, shown as {idle_secs}"
    );
    assert_eq!(client_field(&line_of(&busy_id), "idle"), "0");
    keep_busy(&mut busy, Duration::from_millis(4_500));
    assert!(idle.closed(), "idle past the timeout: closed");
    assert_eq!(busy.wire(&["PING"]), "+PONG\r\n", "busy all along: open");
    // Both still hear what they wait for: they were never closed.
    assert_eq!(busy.wire(&["PUBLISH", "news", "hi"]), ":1\r\n");
    assert_eq!(
        subscriber.reply(),
        Frame::Array(vec![bulk("message"), bulk("news"), bulk("hi")])
    );
    // The first command anyone ran after MONITOR.
    let seen = text(&monitor.reply());
    assert!(seen.ends_with("\"CLIENT\" \"ID\""), "MONITOR saw {seen}");
    assert_eq!(busy.wire(&["CONFIG", "SET", "timeout", "0"]), "+OK\r\n");
}

#[test]
fn client_kill_maxage_keeps_younger_connections() {
    let srv = TestServer::start();
    let mut killer = Raw::new(&srv);
    let mut old = Raw::new(&srv);
    old.call(&["PING"]);
    // `age` counts whole seconds: wait until `old` is at least 2 s old.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while client_field(&text(&old.call(&["CLIENT", "INFO"])), "age")
        .parse::<u64>()
        .unwrap()
        < 2
    {
        assert!(std::time::Instant::now() < deadline, "age never reached 2");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut young = Raw::new(&srv);
    young.call(&["PING"]);
    let young_id = int(&young.call(&["CLIENT", "ID"]));
    let old_id = int(&old.call(&["CLIENT", "ID"]));

    // Nobody is 1000 s old; only `old` (and the killer, skipped) is 2 s old.
    assert_eq!(killer.wire(&["CLIENT", "KILL", "MAXAGE", "1000"]), ":0\r\n");
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "MAXAGE", "2", "ID", &old_id.to_string()]),
        ":1\r\n"
    );
    assert!(old.closed());
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "ID", &young_id.to_string(), "MAXAGE", "2"]),
        ":0\r\n",
        "a connection younger than MAXAGE stays"
    );
    assert_eq!(young.wire(&["PING"]), "+PONG\r\n");

    // 7.4's errors: not a number, then not positive.
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "MAXAGE", "x"]),
        "-ERR maxage is not an integer or out of range\r\n"
    );
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "MAXAGE", "99999999999999999999"]),
        "-ERR maxage is not an integer or out of range\r\n"
    );
    for bad in ["0", "-5"] {
        assert_eq!(
            killer.wire(&["CLIENT", "KILL", "MAXAGE", bad]),
            "-ERR maxage should be greater than 0\r\n"
        );
    }
    assert_eq!(
        killer.wire(&["CLIENT", "KILL", "ID", "1", "MAXAGE"]),
        "-ERR syntax error\r\n"
    );
    let help = names(&killer.call(&["CLIENT", "HELP"]));
    let at = help
        .iter()
        .position(|l| l == "    * MAXAGE <maxage>")
        .expect("MAXAGE in CLIENT HELP");
    assert_eq!(
        help[at + 1],
        "      Kill connections older than the specified age."
    );
}

#[test]
fn watched_keys_show_in_client_list_and_info() {
    let srv = TestServer::start();
    let mut a = Raw::new(&srv);
    let mut b = Raw::new(&srv);
    let line = text(&a.call(&["CLIENT", "INFO"]));
    assert_eq!(client_field(&line, "watch"), "0");
    // 7.4 puts `watch=` right after `multi=`.
    assert!(line.contains(" multi=-1 watch=0 qbuf="), "{line}");
    assert_eq!(info_num(&mut a, "watching_clients"), 0);
    assert_eq!(info_num(&mut a, "total_watched_keys"), 0);

    // A key watched twice by one client counts once; keys watched by two clients
    // count once each in total_watched_keys.
    assert_eq!(a.wire(&["WATCH", "k1", "k2", "k1"]), "+OK\r\n");
    assert_eq!(a.wire(&["WATCH", "k2"]), "+OK\r\n");
    assert_eq!(b.wire(&["WATCH", "k2", "k3"]), "+OK\r\n");
    let a_id = int(&a.call(&["CLIENT", "ID"]));
    let list = text(&b.call(&["CLIENT", "LIST"]));
    let a_line = list
        .lines()
        .find(|l| l.starts_with(&format!("id={a_id} ")))
        .unwrap();
    assert_eq!(client_field(a_line, "watch"), "2", "{a_line}");
    assert_eq!(
        client_field(&text(&b.call(&["CLIENT", "INFO"])), "watch"),
        "2"
    );
    assert_eq!(info_num(&mut a, "watching_clients"), 2);
    assert_eq!(info_num(&mut a, "total_watched_keys"), 3);

    // EXEC, UNWATCH, DISCARD and a closing connection each drop their watches.
    a.call(&["MULTI"]);
    a.call(&["PING"]);
    assert_eq!(items(&a.call(&["EXEC"])).len(), 1);
    assert_eq!(
        client_field(&text(&a.call(&["CLIENT", "INFO"])), "watch"),
        "0"
    );
    assert_eq!(info_num(&mut a, "watching_clients"), 1);
    assert_eq!(info_num(&mut a, "total_watched_keys"), 2);
    b.call(&["UNWATCH"]);
    assert_eq!(info_num(&mut a, "watching_clients"), 0);
    assert_eq!(info_num(&mut a, "total_watched_keys"), 0);
    b.call(&["WATCH", "k9"]);
    b.call(&["MULTI"]);
    b.call(&["DISCARD"]);
    assert_eq!(info_num(&mut a, "total_watched_keys"), 0);
    b.call(&["WATCH", "k9"]);
    assert_eq!(info_num(&mut a, "watching_clients"), 1);
    drop(b);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while info_num(&mut a, "watching_clients") != 0 || info_num(&mut a, "total_watched_keys") != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a closed client's watches stay counted"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // pubsub_clients (7.4) counts subscribed connections.
    let mut sub = Raw::new(&srv);
    sub.call(&["SUBSCRIBE", "ch"]);
    assert_eq!(info_num(&mut a, "pubsub_clients"), 1);
}

#[test]
fn command_count_list_and_info() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    let count = int(&c.call(&["COMMAND", "COUNT"]));
    let list = names(&c.call(&["COMMAND", "LIST"]));
    // As in Redis: COUNT counts commands, LIST also names every subcommand.
    let top: Vec<&String> = list.iter().filter(|n| !n.contains('|')).collect();
    assert_eq!(count as usize, top.len());
    for name in [
        "get",
        "ping",
        "client",
        "client|kill",
        "command|getkeys",
        "multi",
    ] {
        assert!(
            list.iter().any(|n| n == name),
            "{name} missing from COMMAND LIST"
        );
    }
    assert_eq!(items(&c.call(&["COMMAND"])).len(), count as usize);
    assert_eq!(items(&c.call(&["COMMAND", "INFO"])).len(), count as usize);

    let pattern = names(&c.call(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "CLIENT|*name"]));
    assert_eq!(pattern.len(), 2, "{pattern:?}");
    assert!(
        pattern.contains(&"client|setname".to_string())
            && pattern.contains(&"client|getname".to_string())
    );
    let conn = names(&c.call(&["COMMAND", "LIST", "FILTERBY", "ACLCAT", "connection"]));
    assert!(
        conn.contains(&"hello".to_string()) && !conn.contains(&"get".to_string()),
        "{conn:?}"
    );
    assert_eq!(
        c.wire(&["COMMAND", "LIST", "FILTERBY", "MODULE", "x"]),
        "*0\r\n"
    );
    assert_eq!(
        c.wire(&["COMMAND", "LIST", "FILTERBY", "BOGUS", "x"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        c.wire(&["COMMAND", "LIST", "FILTERBY", "PATTERN"]),
        "-ERR syntax error\r\n"
    );
    assert_eq!(
        c.wire(&["COMMAND", "NOPE"]),
        "-ERR unknown subcommand 'NOPE'. Try COMMAND HELP.\r\n"
    );

    // COMMAND INFO get: exactly what Redis 7 sends.
    let get = "*1\r\n*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n\
               *3\r\n+@read\r\n+@string\r\n+@fast\r\n*0\r\n\
               *1\r\n*6\r\n$5\r\nflags\r\n*2\r\n+RO\r\n+access\r\n\
               $12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n\
               $9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n\
               *6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n*0\r\n";
    assert_eq!(c.wire(&["COMMAND", "INFO", "get"]), get);

    // Unknown names get a nil entry; subcommands can be asked for by full name.
    let info = c.call(&["COMMAND", "INFO", "nosuch", "GET", "client|kill"]);
    let entries = items(&info);
    assert_eq!(entries[0], Frame::Null);
    assert_eq!(text(&items(&entries[1])[0]), "get");
    assert_eq!(text(&items(&entries[2])[0]), "client|kill");
    assert_eq!(int(&items(&entries[2])[1]), -3);

    // Containers list their subcommands with the same shape.
    let client = c.call(&["COMMAND", "INFO", "client"]);
    let client = &items(&client)[0];
    assert_eq!(int(&items(client)[1]), -2);
    let subs = items(&items(client)[9]);
    assert!(subs.iter().all(|s| items(s).len() == 10));
    let setname = subs
        .iter()
        .find(|s| text(&items(s)[0]) == "client|setname")
        .expect("client|setname");
    assert_eq!(int(&items(setname)[1]), 3);

    // In RESP3, flags and categories are sets.
    c.call(&["HELLO", "3"]);
    let info = c.call(&["COMMAND", "INFO", "get"]);
    let entry = items(&items(&info)[0]);
    assert!(
        matches!(entry[2], Frame::Set(_)) && matches!(entry[6], Frame::Set(_)),
        "{entry:?}"
    );
    let flags = names(&entry[2]);
    assert!(flags.contains(&"readonly".to_string()) && flags.contains(&"fast".to_string()));
}

#[test]
fn command_info_key_positions_agree_with_key_specs() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    let all = c.call(&["COMMAND", "INFO"]);
    let mut checked = 0;
    for entry in items(&all) {
        let e = items(entry);
        let (first, last, step) = (int(&e[3]), int(&e[4]), int(&e[5]));
        let specs = items(&e[8]);
        if first == 0 {
            continue;
        }
        assert!(
            step >= 1 && (last < 0 || last >= first),
            "{}: {first}/{last}/{step}",
            text(&e[0])
        );
        let begin = field(&specs[0], "begin_search").unwrap();
        let index = int(field(field(begin, "spec").unwrap(), "index").unwrap());
        assert_eq!(
            index,
            first,
            "{}: first key spec starts at first",
            text(&e[0])
        );
        checked += 1;
    }
    assert!(checked >= 2, "get and set at least have keys");
}

#[test]
fn command_docs() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    let docs = c.call(&["COMMAND", "DOCS", "get", "nosuch"]);
    // RESP2: a flat array, name then its doc map; unknown names are left out.
    assert_eq!(items(&docs).len(), 2);
    let get = field(&docs, "get").unwrap();
    assert_eq!(text(field(get, "since").unwrap()), "1.0.0");
    assert_eq!(text(field(get, "group").unwrap()), "string");
    assert_eq!(text(field(get, "complexity").unwrap()), "O(1)");
    assert!(!text(field(get, "summary").unwrap()).is_empty());

    c.call(&["HELLO", "3"]);
    let docs = c.call(&["COMMAND", "DOCS", "client"]);
    assert!(matches!(docs, Frame::Map(_)));
    let client = field(&docs, "client").unwrap();
    let subs = field(client, "subcommands").expect("containers list subcommands");
    assert!(matches!(subs, Frame::Map(_)));
    assert_eq!(
        text(field(field(subs, "client|list").unwrap(), "group").unwrap()),
        "connection"
    );
    let all = c.call(&["COMMAND", "DOCS"]);
    let Frame::Map(all) = all else {
        panic!("COMMAND DOCS is a map")
    };
    let count = int(&c.call(&["COMMAND", "COUNT"]));
    assert_eq!(all.len() as i64, count);
}

#[test]
fn command_getkeys() {
    let srv = TestServer::start();
    let mut c = Raw::new(&srv);
    let keys = c.call(&["COMMAND", "GETKEYS", "MSET", "a", "1", "b", "2"]);
    assert_eq!(keys, Frame::Array(vec![bulk("a"), bulk("b")]));
    assert_eq!(
        c.call(&["COMMAND", "GETKEYS", "get", "k"]),
        Frame::Array(vec![bulk("k")])
    );
    assert_eq!(
        c.wire(&["COMMAND", "GETKEYS", "nosuch", "x"]),
        "-ERR Invalid command specified\r\n"
    );
    assert_eq!(
        c.wire(&["COMMAND", "GETKEYS", "client", "nosuch"]),
        "-ERR Invalid command specified\r\n"
    );
    assert_eq!(
        c.wire(&["COMMAND", "GETKEYS", "get", "a", "b"]),
        "-ERR Invalid number of arguments specified for command\r\n"
    );
    assert_eq!(
        c.wire(&["COMMAND", "GETKEYS", "client", "list"]),
        "-ERR The command has no key arguments\r\n"
    );
    assert_eq!(
        c.wire(&["COMMAND", "GETKEYS", "get"]),
        "-ERR wrong number of arguments for 'command|getkeys' command\r\n"
    );
    let flags = c.call(&["COMMAND", "GETKEYSANDFLAGS", "set", "k", "v"]);
    assert_eq!(
        flags,
        Frame::Array(vec![Frame::Array(vec![
            bulk("k"),
            Frame::Array(vec![
                Frame::Simple("OW".into()),
                Frame::Simple("update".into())
            ])
        ])])
    );
    let help = names(&c.call(&["COMMAND", "HELP"]));
    assert_eq!(
        help[0],
        "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    );
    assert!(help.iter().any(|l| l.starts_with("GETKEYS")));
}

#[test]
fn redis_cli_talks_to_it() {
    let srv = TestServer::start();
    assert_eq!(srv.cli_out(&["PING"]), "PONG");
    let hello = srv.cli_out(&["-3", "HELLO", "3"]);
    assert!(hello.contains("proto"), "{hello}");
    let count: i64 = srv.cli_out(&["COMMAND", "COUNT"]).parse().unwrap();
    assert!(count > 10);
    let name = srv.cli_out(&["CLIENT", "SETNAME", "cli"]);
    assert_eq!(name, "OK");
    let mut s = srv.raw();
    roundtrip(&mut s, &resp_cmd(&[b"ECHO", b"hi"]), b"$2\r\nhi\r\n");
}
