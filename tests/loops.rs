//! The client loops gathering a light load on one loop and spreading a load
//! that fills it (`gather`), with connections that lose nothing on the way: a
//! transaction half queued, a WATCH, a subscription, client-side caching's
//! invalidations, and replies in order.

mod harness;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::fenced::Conn;
use harness::{info_value, loop_connections, resp_cmd, TestServer};
use relcache_protocol::resp::Frame;

/// What INFO loops says: loops taking connections, and each loop's connections.
fn loops(c: &mut Conn) -> (u64, Vec<u64>) {
    let info = c.reply(&["INFO", "loops"]);
    (info_value(&info, "loops_active"), loop_connections(&info))
}

/// Waits until INFO loops shows `want` (given what it shows), for at most 20
/// seconds: what it showed last.
fn wait_for(c: &mut Conn, what: &str, want: impl Fn(u64, &[u64]) -> bool) -> (u64, Vec<u64>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (active, each) = loops(c);
        if want(active, &each) {
            return (active, each);
        }
        assert!(
            Instant::now() < deadline,
            "never {what}: {active} active, {each:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Connections with something in flight on each side of a move.
struct Clients {
    multi: Conn,
    watching: Conn,
    subscriber: Conn,
    tracking: Conn,
    plain: Vec<Conn>,
}

impl Clients {
    fn new(port: u16) -> Clients {
        let mut multi = Conn::new(port);
        assert_eq!(multi.reply(&["MULTI"]), "+OK\r\n");
        assert_eq!(multi.reply(&["INCR", "queued"]), "+QUEUED\r\n");
        let mut watching = Conn::new(port);
        assert_eq!(watching.reply(&["WATCH", "watched"]), "+OK\r\n");
        let mut subscriber = Conn::new(port);
        assert!(subscriber.reply(&["HELLO", "3"]).starts_with('%'));
        assert!(subscriber
            .text(&["SUBSCRIBE", "news"])
            .contains("subscribe"));
        let mut tracking = Conn::new(port);
        assert!(tracking.reply(&["HELLO", "3"]).starts_with('%'));
        assert_eq!(tracking.reply(&["CLIENT", "TRACKING", "on"]), "+OK\r\n");
        let plain = (0..5).map(|_| Conn::new(port)).collect();
        Clients {
            multi,
            watching,
            subscriber,
            tracking,
            plain,
        }
    }

    /// Everything they had going still holds, wherever they now live: the
    /// queued command runs at EXEC, a write to the watched key fails the
    /// watcher's transaction, the subscriber hears a PUBLISH, and the tracking
    /// client is told of a key it read being written. `round` names the keys.
    fn still_whole(&mut self, ctl: &mut Conn, round: u32) {
        assert!(self.multi.reply(&["EXEC"]).contains(":1\r\n"));
        assert_eq!(ctl.reply(&["DEL", "queued"]), ":1\r\n");
        assert_eq!(self.multi.reply(&["MULTI"]), "+OK\r\n");
        assert_eq!(self.multi.reply(&["INCR", "queued"]), "+QUEUED\r\n");

        assert_eq!(
            ctl.reply(&["SET", "watched", &round.to_string()]),
            "+OK\r\n"
        );
        assert_eq!(self.watching.reply(&["MULTI"]), "+OK\r\n");
        assert_eq!(
            self.watching.reply(&["SET", "watched", "mine"]),
            "+QUEUED\r\n"
        );
        assert_eq!(self.watching.reply(&["EXEC"]), "*-1\r\n");
        assert_eq!(self.watching.reply(&["WATCH", "watched"]), "+OK\r\n");

        let said = format!("said{round}");
        assert_eq!(ctl.reply(&["PUBLISH", "news", &said]), ":1\r\n");
        let heard = format!("{:?}", self.subscriber.frame());
        assert!(heard.contains(&said), "{heard}");

        let key = format!("tracked{round}");
        assert_eq!(self.tracking.reply(&["GET", &key]), "_\r\n");
        assert_eq!(ctl.reply(&["SET", &key, "1"]), "+OK\r\n");
        let told = format!("{:?}", self.tracking.frame());
        assert!(told.contains("invalidate") && told.contains(&key), "{told}");

        for (i, c) in self.plain.iter_mut().enumerate() {
            let key = format!("plain{round}-{i}");
            assert_eq!(c.reply(&["SET", &key, "v"]), "+OK\r\n");
            assert_eq!(c.reply(&["GET", &key]), "$1\r\nv\r\n");
        }
    }
}

/// An idle server keeps its connections on one loop; turning gathering off
/// spreads them evenly, turning it on gathers them again, and through both
/// moves every connection keeps its transaction, WATCH, subscription and
/// tracking.
#[test]
fn an_idle_server_s_connections_gather_and_spread_losing_nothing() {
    let s = TestServer::start_with(&["--threads", "2", "--loop-gather-below", "80"]);
    let mut ctl = Conn::new(s.port);
    let mut clients = Clients::new(s.port);
    // ctl, the four with something going and five plain ones.
    let (active, each) = wait_for(&mut ctl, "gathered", |active, each| {
        active == 1 && each == [10, 0]
    });
    assert_eq!((active, each), (1, vec![10, 0]));
    clients.still_whole(&mut ctl, 0);

    assert_eq!(
        ctl.reply(&["CONFIG", "SET", "loop-gather-below", "0"]),
        "+OK\r\n"
    );
    wait_for(&mut ctl, "spread", |active, each| {
        active == 2 && each == [5, 5]
    });
    clients.still_whole(&mut ctl, 1);
    // New connections go to the loop with the fewest while spread.
    let late = Conn::new(s.port);
    let (_, each) = wait_for(&mut ctl, "accepted", |_, each| {
        each.iter().sum::<u64>() == 11
    });
    assert!(each.iter().all(|&n| n == 5 || n == 6), "{each:?}");
    drop(late);

    assert_eq!(
        ctl.reply(&["CONFIG", "SET", "loop-gather-below", "80"]),
        "+OK\r\n"
    );
    wait_for(&mut ctl, "gathered again", |active, each| {
        active == 1 && each == [10, 0]
    });
    clients.still_whole(&mut ctl, 2);
    let info = ctl.reply(&["INFO", "loops"]);
    assert_eq!(info_value::<u64>(&info, "loop_spreads"), 1);
    assert_eq!(info_value::<u64>(&info, "loop_gathers"), 1);
    // Five went each way.
    assert_eq!(info_value::<u64>(&info, "balance_moves"), 10);
}

/// How the pipeliners load the server.
#[derive(Clone, Copy)]
enum Load {
    /// Batches of 64 EVALs of a script that INCRs the connection's key, back
    /// to back.
    Script(&'static str),
    /// Batches of 64 INCRs each followed by a GET of a 64 KB value, sent in
    /// two writes split inside a request, 2 ms apart, and read 5 ms after:
    /// requests half read and 4 MB of replies, more than a socket takes, half
    /// written for a while. 10 ms between batches keeps the load light
    /// enough to gather.
    BigReplies,
}

const BIG: usize = 65536;

/// `n` connections pipelining `load` until `stop`, each on its own key,
/// checking every reply: the counts in order and the values whole. What
/// each counted to.
fn pipeliners(
    port: u16,
    n: usize,
    load: Load,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<(String, i64)>> {
    (0..n)
        .map(|i| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = Conn::new(port);
                let key = format!("count{i}");
                let big = format!("big{i}");
                let mut batch = Vec::new();
                for _ in 0..64 {
                    match load {
                        Load::Script(body) => batch.extend(resp_cmd(&[
                            b"EVAL",
                            body.as_bytes(),
                            b"1",
                            key.as_bytes(),
                        ])),
                        Load::BigReplies => {
                            batch.extend(resp_cmd(&[b"INCR", key.as_bytes()]));
                            batch.extend(resp_cmd(&[b"GET", big.as_bytes()]));
                        }
                    }
                }
                if let Load::BigReplies = load {
                    assert_eq!(c.reply(&["SET", &big, &"v".repeat(BIG)]), "+OK\r\n");
                }
                let mut last = 0;
                while !stop.load(Ordering::Relaxed) {
                    match load {
                        Load::Script(_) => c.s.write_all(&batch).unwrap(),
                        Load::BigReplies => {
                            // Inside the 33rd request, whatever its length.
                            let (head, tail) = batch.split_at(batch.len() / 2 + 3);
                            c.s.write_all(head).unwrap();
                            std::thread::sleep(Duration::from_millis(2));
                            c.s.write_all(tail).unwrap();
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                    for _ in 0..64 {
                        match c.frame() {
                            Frame::Integer(v) => {
                                assert_eq!(v, last + 1, "a reply lost or out of order");
                                last = v;
                            }
                            other => panic!("{key} answered {other:?}"),
                        }
                        if let Load::BigReplies = load {
                            match c.frame() {
                                Frame::Bulk(v) => assert_eq!(v.len(), BIG),
                                other => panic!("GET {big} answered {other:?}"),
                            }
                        }
                    }
                    if let Load::BigReplies = load {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                (key, last)
            })
        })
        .collect()
}

/// Each pipeliner's count is what the server holds.
fn counts_held(ctl: &mut Conn, done: Vec<std::thread::JoinHandle<(String, i64)>>) {
    for h in done {
        let (key, n) = h.join().unwrap();
        assert!(n > 0, "{key} never ran");
        assert_eq!(
            ctl.reply(&["GET", &key]),
            format!("${}\r\n{n}\r\n", n.to_string().len())
        );
    }
}

/// A loop kept full (pipelined scripts that each spin for a while, well under
/// the 1 ms past which a script hands its loop to another thread and the loop
/// reads as idle; 64 deep from six connections, so the loop always has work
/// queued) spreads the connections;
/// once the load ends, they gather again. The pipelined replies come in order
/// throughout.
#[test]
fn a_full_loop_spreads_and_gathers_again_once_idle() {
    let s = TestServer::start_with(&["--threads", "2", "--loop-gather-below", "80"]);
    let mut ctl = Conn::new(s.port);
    wait_for(&mut ctl, "gathered", |active, each| {
        active == 1 && each == [1, 0]
    });
    let stop = Arc::new(AtomicBool::new(false));
    let body = "for i = 1, 5000 do end return redis.call('incr', KEYS[1])";
    let busy = pipeliners(s.port, 6, Load::Script(body), &stop);
    wait_for(&mut ctl, "spread", |active, _| active == 2);
    stop.store(true, Ordering::Relaxed);
    counts_held(&mut ctl, busy);
    wait_for(&mut ctl, "gathered again", |active, each| {
        active == 1 && each == [1, 0]
    });
    let info = ctl.reply(&["INFO", "loops"]);
    assert!(info_value::<u64>(&info, "loop_spreads") >= 1);
    assert!(info_value::<u64>(&info, "loop_gathers") >= 1);
}

/// Connections moved back and forth while they pipeline, with requests half
/// read and replies half written, lose and reorder nothing.
#[test]
fn connections_moved_mid_pipeline_keep_every_reply_in_order() {
    let s = TestServer::start_with(&["--threads", "2", "--loop-gather-below", "80"]);
    let mut ctl = Conn::new(s.port);
    let stop = Arc::new(AtomicBool::new(false));
    let workers = pipeliners(s.port, 6, Load::BigReplies, &stop);
    wait_for(&mut ctl, "all connected", |_, each| {
        each.iter().sum::<u64>() == 7
    });
    let turns = |ctl: &mut Conn| {
        let info = ctl.reply(&["INFO", "loops"]);
        let turns: [u64; 2] = [
            info_value(&info, "loop_spreads"),
            info_value(&info, "loop_gathers"),
        ];
        turns
    };
    for round in 0..6 {
        let before = turns(&mut ctl);
        let spread = round % 2 == 0;
        let below = if spread { "0" } else { "90" };
        assert_eq!(
            ctl.reply(&["CONFIG", "SET", "loop-gather-below", below]),
            "+OK\r\n"
        );
        if spread {
            wait_for(&mut ctl, "spread", |a, each| {
                a == 2 && each.iter().all(|&n| n > 0)
            });
        } else {
            wait_for(&mut ctl, "gathered", |a, each| a == 1 && each == [7, 0]);
        }
        let after = turns(&mut ctl);
        let turned = usize::from(!spread);
        assert!(
            after[turned] > before[turned],
            "round {round}: {before:?} {after:?}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    counts_held(&mut ctl, workers);
}

/// A connection parked in a blocking command when the loops gather stays on
/// its loop, and follows the others to the first once its command answers.
#[test]
fn a_parked_connection_gathers_once_its_command_answers() {
    let s = TestServer::start_with(&["--threads", "2", "--loop-gather-below", "0"]);
    let mut ctl = Conn::new(s.port);
    // Which loop ctl is on (the harness's readiness probe may still be
    // counted as it closes).
    let (_, alone) = wait_for(&mut ctl, "ctl alone", |_, each| {
        each.iter().sum::<u64>() == 1
    });
    let ctl_on_1 = u64::from(alone[1] == 1);
    // ctl holds the lease on u:1; three waiters wait for it, parked, spread
    // two and two with ctl, so at least one waits on the second loop.
    // For a minute: lapsed, it would go to a waiter, which would unpark.
    let token = ctl.reply(&["IDSET.LEASE", "u:1", "PX", "60000"]);
    let token = token.trim_start_matches(':').trim_end().to_string();
    assert!(token.parse::<u64>().unwrap() > 0, "{token}");
    let mut waiters: Vec<(Conn, String)> = (0..3)
        .map(|_| {
            let mut w = Conn::new(s.port);
            let id = w.reply(&["CLIENT", "ID"]);
            let id = id.trim_start_matches(':').trim_end().to_string();
            (w, id)
        })
        .collect();
    for (w, _) in &mut waiters {
        w.send(&["IDSET.LEASE", "u:1", "BLOCK", "0"]);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_value::<u64>(&ctl.reply(&["INFO", "clients"]), "blocked_clients") != 3 {
        assert!(Instant::now() < deadline, "the lease waiters never parked");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_, spread) = loops(&mut ctl);
    assert_eq!(spread, [2, 2]);
    let parked_on_1 = spread[1] - ctl_on_1;
    assert!(parked_on_1 >= 1);

    assert_eq!(
        ctl.reply(&["CONFIG", "SET", "loop-gather-below", "80"]),
        "+OK\r\n"
    );
    wait_for(&mut ctl, "gathered", |active, _| active == 1);
    // A request behind a parked command is read, and its connection settles
    // while still parked: it must not go.
    for (w, _) in &mut waiters {
        w.send(&["PING"]);
    }
    // Several rounds later, the parked ones are still where they were.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(loops(&mut ctl), (1, vec![4 - parked_on_1, parked_on_1]));
    // Each wait ended (as if it ran out), each waiter follows the others.
    for (w, id) in &mut waiters {
        assert_eq!(ctl.reply(&["CLIENT", "UNBLOCK", id]), ":1\r\n");
        if let Frame::Error(e) = w.frame() {
            panic!("the waiter was answered {e:?}");
        }
        // The PING sent while it was parked, then one sent now.
        assert_eq!(
            format!("{:?}", w.frame()),
            format!("{:?}", Frame::Simple("PONG".into()))
        );
        assert_eq!(w.reply(&["PING"]), "+PONG\r\n");
    }
    wait_for(&mut ctl, "followed", |active, each| {
        active == 1 && each == [4, 0]
    });
}
