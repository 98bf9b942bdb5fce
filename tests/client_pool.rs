//! End-to-end tests of the client's connection pool and typed commands against the
//! real server: reuse, the connection bound, replacing broken connections, timeouts,
//! RESP3 with AUTH, every typed IDSET command, and the lease commands.

mod harness;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::TestServer;
use relcache_client::{
    build_table, Client, Cmd, Error, Frame, LeaseOpts, Leased, LoadOpts, Pool, PoolConfig,
    PoolStatus, Protocol,
};

fn config(server: &TestServer) -> PoolConfig {
    PoolConfig {
        addr: server.addr(),
        connect_timeout: Duration::from_secs(10),
        command_timeout: Duration::from_secs(10),
        ..PoolConfig::default()
    }
}

fn text(frame: Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Verbatim { text: b, .. } => String::from_utf8(b.to_vec()).unwrap(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// The server's id of the connection a pool call ran on.
async fn client_id(pool: &Pool) -> i64 {
    match pool.cmd(&["CLIENT", "ID"]).await.unwrap() {
        Frame::Integer(id) => id,
        other => panic!("CLIENT ID answered {other:?}"),
    }
}

/// Connections the server lists with an id of at least `first`: the ones opened
/// since then (the harness's readiness probe is older, and may linger).
async fn clients_since(pool: &Pool, first: i64) -> usize {
    let list = text(pool.cmd(&["CLIENT", "LIST"]).await.unwrap());
    list.lines()
        .filter_map(|l| {
            l.strip_prefix("id=")?
                .split(' ')
                .next()?
                .parse::<i64>()
                .ok()
        })
        .filter(|&id| id >= first)
        .count()
}

fn status(idle: usize, in_use: usize) -> PoolStatus {
    PoolStatus { idle, in_use }
}

#[tokio::test]
async fn sequential_calls_reuse_one_connection() {
    let server = TestServer::start();
    let pool = Pool::new(config(&server));
    assert_eq!(pool.status(), status(0, 0), "nothing is opened up front");
    let first = client_id(&pool).await;
    for _ in 0..20 {
        assert_eq!(client_id(&pool).await, first);
    }
    assert_eq!(pool.status(), status(1, 0));
    assert_eq!(clients_since(&pool, first).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_tasks_share_at_most_max_connections() {
    let server = TestServer::start();
    let pool = Pool::new(PoolConfig {
        max_connections: 5,
        ..config(&server)
    });
    let first = client_id(&pool).await;
    let (live, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (pool, live, peak) = (pool.clone(), live.clone(), peak.clone());
            tokio::spawn(async move {
                let mut conn = pool.get().await.unwrap();
                peak.fetch_max(live.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                let Frame::Integer(id) = conn.cmd(&["CLIENT", "ID"]).await.unwrap() else {
                    panic!("CLIENT ID is an integer");
                };
                for _ in 0..3 {
                    conn.ping().await.unwrap();
                }
                live.fetch_sub(1, Ordering::SeqCst);
                id
            })
        })
        .collect();
    let mut ids = HashSet::from([first]);
    for task in tasks {
        ids.insert(task.await.unwrap());
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!((1..=5).contains(&peak), "{peak} connections in use at once");
    assert!(ids.len() <= 5, "{} connections opened", ids.len());
    // Every connection opened came back, and the server agrees on how many.
    assert_eq!(pool.status(), status(ids.len(), 0));
    assert_eq!(clients_since(&pool, first).await, ids.len());
}

#[tokio::test]
async fn a_full_pool_makes_callers_wait_within_the_connect_timeout() {
    let server = TestServer::start();
    let pool = Pool::new(PoolConfig {
        max_connections: 2,
        connect_timeout: Duration::from_millis(200),
        ..config(&server)
    });
    let mut a = pool.get().await.unwrap();
    let b = pool.get().await.unwrap();
    assert_eq!(pool.status(), status(0, 2));
    let start = Instant::now();
    let err = pool.get().await.unwrap_err();
    assert!(matches!(err, Error::PoolBusy), "{err:?}");
    assert!(
        err.is_timeout() && !err.is_connection_lost(),
        "nothing was lost"
    );
    assert!(start.elapsed() >= Duration::from_millis(200));
    // The slot a connection frees goes with the connection: the next caller gets
    // it back rather than a new one.
    let a_id = a.cmd(&["CLIENT", "ID"]).await.unwrap();
    drop(a);
    let mut c = pool.get().await.unwrap();
    assert_eq!(c.cmd(&["CLIENT", "ID"]).await.unwrap(), a_id);
    // A discarded connection is closed, not returned.
    c.discard();
    drop(b);
    assert_eq!(pool.status(), status(1, 0));
}

#[tokio::test]
async fn a_connection_the_server_killed_is_dropped_and_replaced() {
    let server = TestServer::start();
    let pool = Pool::new(PoolConfig {
        max_connections: 1,
        ..config(&server)
    });
    let killed = client_id(&pool).await;
    let mut admin = Client::connect(server.addr()).await.unwrap();
    let reply = admin
        .cmd(&["CLIENT", "KILL", "ID", &killed.to_string()])
        .await
        .unwrap();
    assert_eq!(reply, Frame::Integer(1));
    // The kill lands asynchronously: until it does the old connection may still
    // answer, and a call caught by it fails; after that a new connection serves.
    let mut replaced = None;
    for _ in 0..1000 {
        match pool.cmd(&["CLIENT", "ID"]).await {
            Ok(Frame::Integer(id)) if id == killed => continue,
            Ok(Frame::Integer(id)) => {
                replaced = Some(id);
                break;
            }
            Ok(other) => panic!("CLIENT ID answered {other:?}"),
            Err(e) => assert!(e.is_connection_lost(), "{e:?}"),
        }
    }
    let replaced = replaced.expect("the pool never replaced the killed connection");
    assert!(replaced > killed);
    assert_eq!(client_id(&pool).await, replaced);
    assert_eq!(pool.status(), status(1, 0));
}

#[tokio::test]
async fn the_command_timeout_fires_on_a_server_that_never_answers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts every connection, answers the pool's handshake PING, and then never
    // writes another byte.
    let (accepted, mut sockets) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let accepted = accepted.clone();
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut ping = [0u8; 14];
                socket.read_exact(&mut ping).await.unwrap();
                assert_eq!(&ping, b"*1\r\n$4\r\nPING\r\n");
                socket.write_all(b"+PONG\r\n").await.unwrap();
                let _ = accepted.send(socket);
            });
        }
    });
    let timeout = Duration::from_millis(300);
    let pool = Pool::new(PoolConfig {
        addr: addr.to_string(),
        command_timeout: timeout,
        ..PoolConfig::default()
    });
    let slack = Duration::from_secs(3);

    let start = Instant::now();
    let err = pool.cmd(&["PING"]).await.unwrap_err();
    let took = start.elapsed();
    assert!(err.is_timeout(), "{err:?}");
    assert!(took >= timeout && took < timeout + slack, "{took:?}");
    assert_eq!(
        pool.status(),
        status(0, 0),
        "the timed-out connection is gone"
    );

    // A command the server may hold back gets that much longer.
    let wait = Duration::from_millis(400);
    let lease = Cmd::idset_lease(
        "k",
        LeaseOpts {
            px: None,
            wait: Some(wait),
        },
    );
    let start = Instant::now();
    let err = pool.run(lease).await.unwrap_err();
    let took = start.elapsed();
    assert!(err.is_timeout(), "{err:?}");
    assert!(
        took >= timeout + wait && took < timeout + wait + slack,
        "{took:?}"
    );

    // Two calls, two connections: the first was not reused out of step.
    for _ in 0..2 {
        let socket = tokio::time::timeout(slack, sockets.recv()).await;
        assert!(matches!(socket, Ok(Some(_))), "a connection was not opened");
    }
}

#[tokio::test]
async fn an_unreachable_server_is_an_io_error_and_frees_the_slot() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let pool = Pool::new(PoolConfig {
        addr: format!("127.0.0.1:{port}"),
        max_connections: 1,
        ..PoolConfig::default()
    });
    for _ in 0..2 {
        let err = pool.cmd(&["PING"]).await.unwrap_err();
        assert!(err.is_io(), "{err:?}");
    }
    assert_eq!(pool.status(), status(0, 0));
}

#[tokio::test]
async fn a_resp3_pool_authenticates_then_says_hello() {
    let server = TestServer::start_with(&["--requirepass", "s3cret"]);
    let pool = Pool::new(PoolConfig {
        protocol: Protocol::Resp3,
        password: Some("s3cret".into()),
        ..config(&server)
    });
    let mut conn = pool.get().await.unwrap();
    assert_eq!(conn.protocol(), Protocol::Resp3);
    let info = text(conn.cmd(&["CLIENT", "INFO"]).await.unwrap());
    assert!(info.contains(" resp=3 "), "{info}");
    drop(conn);
    assert!(!format!("{:?}", pool.config()).contains("s3cret"));

    // Typed replies in their RESP3 shapes: `_` for a miss, a set for SINTER.
    assert!(pool
        .idset_load_ids("a", &[3, 1, 2], LoadOpts::default())
        .await
        .unwrap());
    assert!(pool
        .idset_load_ids("b", &[4, 3, 2], LoadOpts::default())
        .await
        .unwrap());
    assert_eq!(pool.sinter(&["a", "b"]).await.unwrap(), [2, 3]);
    assert_eq!(pool.idset_exists("nope", 1).await.unwrap(), None);
    assert_eq!(pool.idset_mexists("nope", &[1, 2]).await.unwrap(), None);
    assert_eq!(pool.idset_members("nope").await.unwrap(), None);
    assert_eq!(
        pool.idset_which(2, &["a", "nope"]).await.unwrap(),
        [Some(true), None]
    );

    let wrong = Pool::new(PoolConfig {
        password: Some("guess".into()),
        ..config(&server)
    });
    assert!(wrong.get().await.unwrap_err().is_server());
    let none = Pool::new(config(&server));
    assert_eq!(none.ping().await.unwrap_err().code(), Some("NOAUTH"));
}

#[tokio::test]
async fn typed_idset_commands_round_trip() {
    let server = TestServer::start();
    let pool = Pool::new(config(&server));
    let ids: Vec<u64> = (0..1000).map(|i| i * 7).chain([u64::MAX]).collect();
    let follows = |id: u64| ids.contains(&id);

    let ttl = LoadOpts {
        ttl: Some(Duration::from_secs(60)),
        lease: None,
        seq: None,
    };
    assert!(pool
        .idset_load_table("f:1", build_table(&ids), ttl)
        .await
        .unwrap());
    match pool.cmd(&["PTTL", "f:1"]).await.unwrap() {
        Frame::Integer(ms) => assert!(ms > 0 && ms <= 60_000, "PTTL {ms}"),
        other => panic!("PTTL answered {other:?}"),
    }
    assert_eq!(pool.idset_exists("f:1", 7).await.unwrap(), Some(true));
    assert_eq!(pool.idset_exists("f:1", 8).await.unwrap(), Some(false));
    assert_eq!(
        pool.idset_exists("f:1", u64::MAX).await.unwrap(),
        Some(true)
    );
    assert_eq!(pool.idset_exists("nope", 7).await.unwrap(), None);

    let probes: Vec<u64> = (0..100).chain([u64::MAX, u64::MAX - 1]).collect();
    let want: Vec<bool> = probes.iter().map(|&p| follows(p)).collect();
    assert_eq!(
        pool.idset_mexists("f:1", &probes).await.unwrap(),
        Some(want.clone())
    );
    assert_eq!(
        pool.idset_mexistsbin("f:1", &probes).await.unwrap(),
        Some(want)
    );
    assert_eq!(pool.idset_mexistsbin("nope", &probes).await.unwrap(), None);
    assert_eq!(pool.idset_card("f:1").await.unwrap(), Some(1001));
    let mut members = pool.idset_members("f:1").await.unwrap().unwrap();
    members.sort_unstable();
    assert_eq!(members, ids);

    // Write-through: XX never creates a key; plain ADD does.
    assert_eq!(pool.idset_add_xx("nope", &[1]).await.unwrap(), None);
    assert_eq!(pool.idset_card("nope").await.unwrap(), None);
    assert_eq!(pool.idset_add_xx("f:1", &[1, 7]).await.unwrap(), Some(1));
    assert_eq!(pool.idset_rem("f:1", &[1, 2]).await.unwrap(), Some(1));
    assert_eq!(pool.idset_rem("nope", &[1]).await.unwrap(), None);
    assert_eq!(pool.idset_add("f:3", &[5, 5]).await.unwrap(), 1);

    assert!(pool
        .idset_load_ids("f:2", &[7, 14, 15, 0], LoadOpts::default())
        .await
        .unwrap());
    let keys = ["f:1", "f:2", "nope"];
    assert_eq!(
        pool.idset_which(7, &keys).await.unwrap(),
        [Some(true), Some(true), None]
    );
    assert_eq!(
        pool.idset_which(15, &keys).await.unwrap(),
        [Some(false), Some(true), None]
    );
    assert_eq!(pool.sinter(&["f:1", "f:2"]).await.unwrap(), [0, 7, 14]);

    let cards = pool
        .run_pipeline(vec![
            Cmd::idset_card("f:1"),
            Cmd::idset_card("f:2"),
            Cmd::idset_card("nope"),
        ])
        .await
        .unwrap();
    let cards: Vec<_> = cards.into_iter().map(Result::unwrap).collect();
    assert_eq!(cards, [Some(1001), Some(4), None]);
    assert_eq!(pool.del(&["f:1", "f:2", "f:3", "nope"]).await.unwrap(), 3);
    pool.ping().await.unwrap();

    // The same methods on a plain client; a server error leaves it usable.
    let mut client = Client::connect(server.addr()).await.unwrap();
    assert_eq!(client.idset_card("f:2").await.unwrap(), None);
    client.cmd(&["SET", "s", "not a set"]).await.unwrap();
    let err = client.idset_card("s").await.unwrap_err();
    assert_eq!(err.code(), Some("WRONGTYPE"));
    assert!(client.is_usable());
    assert_eq!(
        client.idset_exists("s", 1).await.unwrap_err().code(),
        Some("WRONGTYPE")
    );
}

/// `INFO leases` counter `name`.
async fn lease_stat(pool: &Pool, name: &str) -> u64 {
    let info = text(pool.cmd(&["INFO", "leases"]).await.unwrap());
    harness::info_value(&info, name)
}

#[tokio::test]
async fn leases_let_one_caller_fill_a_miss_while_others_wait() {
    let server = TestServer::start();
    let timeout = Duration::from_millis(300);
    let pool = Pool::new(PoolConfig {
        command_timeout: timeout,
        ..config(&server)
    });
    let (ids, probes) = ([10, 20, 30], [20, 25]);
    let no_wait = LeaseOpts::default();
    let wait = |ms| LeaseOpts {
        px: None,
        wait: Some(Duration::from_millis(ms)),
    };
    // Lease commands run on a connection of the caller's own: the holder fills on
    // the connection that won the lease.
    let lease = |key: &'static str, opts| {
        let pool = pool.clone();
        async move { pool.get().await?.run(Cmd::idset_lease(key, opts)).await }
    };

    // The first to miss is granted the fill; the next is told someone is on it.
    let mut holder = pool.get().await.unwrap();
    let granted = LeaseOpts {
        px: Some(Duration::from_secs(30)),
        wait: None,
    };
    let token = match holder
        .run(Cmd::idset_mexistsbin_lease("u:1", &probes, granted))
        .await
        .unwrap()
    {
        Leased::Granted(token) => token,
        other => panic!("a first miss got {other:?}"),
    };
    let read = |opts| Cmd::idset_mexistsbin_lease("u:1", &probes, opts);
    let mut other = pool.get().await.unwrap();
    assert_eq!(other.run(read(no_wait)).await.unwrap(), Leased::Busy);
    drop(other);
    assert_eq!(lease("u:1", no_wait).await.unwrap(), Leased::Busy);

    // A waiter is answered from the set as soon as the fill lands.
    let waits = lease_stat(&pool, "lease_waits").await;
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut conn = pool.get().await?;
            conn.run(Cmd::idset_mexistsbin_lease("u:1", &probes, wait(10_000)))
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while lease_stat(&pool, "lease_waits").await == waits {
        assert!(Instant::now() < deadline, "the waiter never parked");
    }
    let fill = LoadOpts {
        ttl: None,
        lease: Some(token),
        seq: None,
    };
    assert!(holder
        .run(Cmd::idset_load_ids("u:1", &ids, fill))
        .await
        .unwrap());
    drop(holder);
    assert_eq!(
        waiter.await.unwrap().unwrap(),
        Leased::Hit(vec![true, false])
    );
    assert_eq!(lease("u:1", no_wait).await.unwrap(), Leased::Hit(()));
    assert!(
        !pool.idset_load_ids("u:1", &[1], fill).await.unwrap(),
        "a used lease fills twice"
    );

    // A wait that runs out is Busy, not a timeout, though it outlasts the command
    // timeout.
    let held = match lease("u:2", no_wait).await.unwrap() {
        Leased::Granted(token) => token,
        other => panic!("a first miss got {other:?}"),
    };
    let start = Instant::now();
    assert_eq!(lease("u:2", wait(600)).await.unwrap(), Leased::Busy);
    assert!(start.elapsed() >= Duration::from_millis(600));

    // Giving a lease up lets the next caller have it.
    assert!(pool.idset_release("u:2", held).await.unwrap());
    assert!(!pool.idset_release("u:2", held).await.unwrap());
    let next = match lease("u:2", no_wait).await.unwrap() {
        Leased::Granted(token) => token,
        other => panic!("a released lease was not granted again: {other:?}"),
    };
    assert_ne!(next, held);

    // A write revokes the lease, so a fill read before it is refused.
    assert_eq!(pool.idset_add("u:2", &[99]).await.unwrap(), 1);
    let stale = LoadOpts {
        ttl: None,
        lease: Some(next),
        seq: None,
    };
    assert!(!pool.idset_load_ids("u:2", &[1, 2], stale).await.unwrap());
    assert_eq!(pool.idset_members("u:2").await.unwrap(), Some(vec![99]));
}

/// A lease holder fills on its own connection, so waiters that hold every other
/// connection of the pool cannot keep the fill from landing.
#[tokio::test]
async fn a_fill_lands_even_when_waiters_hold_the_rest_of_the_pool() {
    let server = TestServer::start();
    let pool = Pool::new(PoolConfig {
        max_connections: 3,
        connect_timeout: Duration::from_millis(300),
        ..config(&server)
    });
    let opts = |ms| LeaseOpts {
        px: Some(Duration::from_secs(30)),
        wait: Some(Duration::from_millis(ms)),
    };
    // Counters are read outside the pool under test, which the waiters fill.
    let admin = Pool::new(config(&server));
    let mut holder = pool.get().await.unwrap();
    let Leased::Granted(token) = holder
        .run(Cmd::idset_mexistsbin_lease("k", &[1], opts(0)))
        .await
        .unwrap()
    else {
        panic!("the first miss is granted the lease");
    };
    let waits = lease_stat(&admin, "lease_waits").await;
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut conn = pool.get().await?;
                conn.run(Cmd::idset_mexistsbin_lease("k", &[1, 2], opts(10_000)))
                    .await
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while lease_stat(&admin, "lease_waits").await < waits + 2 {
        assert!(Instant::now() < deadline, "the waiters never parked");
    }
    assert_eq!(pool.status(), status(0, 3), "the pool is all taken");
    let fill = LoadOpts {
        ttl: None,
        lease: Some(token),
        seq: None,
    };
    assert!(holder
        .run(Cmd::idset_load_ids("k", &[2], fill))
        .await
        .unwrap());
    for waiter in waiters {
        assert_eq!(
            waiter.await.unwrap().unwrap(),
            Leased::Hit(vec![false, true])
        );
    }
}

/// `Pool::cmd` hands its connection to the next caller: a command that changes
/// the session must not leave that change behind.
#[tokio::test]
async fn raw_pool_commands_leave_no_session_state_behind() {
    let server = TestServer::start();
    let pool = Pool::new(PoolConfig {
        max_connections: 1,
        ..config(&server)
    });
    let first = client_id(&pool).await;
    assert_eq!(pool.cmd(&["MULTI"]).await.unwrap(), Frame::ok());
    // Not queued in someone else's transaction: answered, on a new connection.
    assert_eq!(pool.idset_exists("k", 1).await.unwrap(), None);
    let after_multi = client_id(&pool).await;
    assert!(after_multi > first);
    // A whole transaction leaves nothing open: the connection is kept.
    let tx = |args: &[&str]| {
        args.iter()
            .map(|a| bytes::Bytes::from(a.to_string()))
            .collect()
    };
    let replies = pool
        .pipeline(&[tx(&["MULTI"]), tx(&["PING"]), tx(&["EXEC"])])
        .await
        .unwrap();
    assert_eq!(replies.len(), 3);
    assert_eq!(client_id(&pool).await, after_multi);
    // A protocol switch is not inherited either.
    assert!(matches!(
        pool.cmd(&["HELLO", "3"]).await.unwrap(),
        Frame::Map(_)
    ));
    assert!(matches!(
        pool.cmd(&["CONFIG", "GET", "maxclients"]).await.unwrap(),
        Frame::Array(_)
    ));
    assert!(client_id(&pool).await > after_multi);
}

/// A server that accepts a connection only to refuse it is a failure to connect,
/// found before the caller's command, and the refused connection is not kept.
#[tokio::test]
async fn a_refused_connection_fails_the_checkout() {
    let server = TestServer::start_with(&["--maxclients", "1"]);
    // The one place, once the harness's readiness probe has let go of it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let only = loop {
        let mut client = Client::connect(server.addr()).await.unwrap();
        if client.run(Cmd::ping()).await.is_ok() {
            break client;
        }
        assert!(Instant::now() < deadline, "never got the one connection");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let pool = Pool::new(config(&server));
    for _ in 0..2 {
        let err = pool.get().await.unwrap_err();
        assert!(
            err.to_string().contains("max number of clients reached") || err.is_connection_lost(),
            "{err:?}"
        );
    }
    assert_eq!(pool.status(), status(0, 0));
    drop(only);
    // Once there is room, the pool connects.
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.ping().await.is_err() {
        assert!(Instant::now() < deadline, "never got a connection");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
