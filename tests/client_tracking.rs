//! The client's key-tracking listener (`relcache_client::Tracker`) against a real
//! `redis-server` 7, whose `CLIENT TRACKING` is the spec: reads on the session's
//! pool are tracked and their invalidations reach the listener; a flush is a null;
//! a listener that is killed, goes silent, or whose server dies ends the session
//! (everything invalid) and a new one is opened; a RESP3 connection tracking for a
//! vanished listener is told its redirect broke.

mod harness;

use std::time::Duration;

use bytes::Bytes;
use harness::proxy::FaultProxy;
use harness::real_redis::RedisServer;
use relcache_client::tracking::Why;
use relcache_client::{
    Client, Cmd, Frame, Invalidation, PoolConfig, Protocol, TrackedSession, Tracker, TrackingConfig,
};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

fn config(addr: String) -> TrackingConfig {
    TrackingConfig {
        heartbeat: Duration::from_millis(200),
        retry: Duration::from_millis(20),
        ..TrackingConfig::new(PoolConfig {
            addr,
            max_connections: 4,
            ..PoolConfig::default()
        })
    }
}

fn start(config: TrackingConfig) -> (Tracker, UnboundedReceiver<Invalidation>) {
    let (tx, rx) = unbounded_channel();
    let tracker = Tracker::start(config, move |inv| {
        let _ = tx.send(inv);
    });
    (tracker, rx)
}

async fn next(rx: &mut UnboundedReceiver<Invalidation>) -> Invalidation {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("an invalidation within 10 s")
        .expect("the tracker is alive")
}

/// Polls for a session other than `not` (by number), as a caller would.
async fn session_after(tracker: &Tracker, not: u64) -> std::sync::Arc<TrackedSession> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(s) = tracker.session().filter(|s| s.number() != not) {
            return s;
        }
        assert!(tokio::time::Instant::now() < deadline, "no new session");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn other_client(redis: &RedisServer) -> Client {
    Client::connect(("127.0.0.1", redis.port)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_read_on_the_session_is_invalidated_when_another_client_writes_it() {
    let redis = RedisServer::start();
    let (tracker, mut rx) = start(config(format!("127.0.0.1:{}", redis.port)));
    let session = session_after(&tracker, 0).await;
    let mut writer = other_client(&redis).await;
    writer.run(Cmd::set("k", "v1")).await.unwrap();
    writer.run(Cmd::set("unread", "x")).await.unwrap();

    let mut conn = session.pool().get().await.unwrap();
    assert_eq!(
        conn.run(Cmd::get("k")).await.unwrap(),
        Some(Bytes::from("v1"))
    );
    // A key nobody tracked changes silently; the one read is reported once.
    writer.run(Cmd::set("unread", "y")).await.unwrap();
    writer.run(Cmd::set("k", "v2")).await.unwrap();
    assert_eq!(
        next(&mut rx).await,
        Invalidation::Keys(vec![Bytes::from("k")])
    );
    // Reported once until read again (default mode forgets the key once told).
    writer.run(Cmd::set("k", "v3")).await.unwrap();
    conn.run(Cmd::get("k")).await.unwrap();
    writer.run(Cmd::del(&["k"])).await.unwrap();
    assert_eq!(
        next(&mut rx).await,
        Invalidation::Keys(vec![Bytes::from("k")])
    );
    assert!(rx.try_recv().is_err(), "nothing else was tracked");

    // A flush is a null: everything.
    conn.run(Cmd::get("k")).await.unwrap();
    writer.cmd(&["FLUSHALL"]).await.unwrap();
    assert_eq!(next(&mut rx).await, Invalidation::All(Why::Flushed));
    assert_eq!(tracker.session().unwrap().number(), session.number());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_listener_ends_the_session_and_a_new_one_tracks_again() {
    let redis = RedisServer::start();
    let (tracker, mut rx) = start(config(format!("127.0.0.1:{}", redis.port)));
    let first = session_after(&tracker, 0).await;
    let mut admin = other_client(&redis).await;
    let id = first.client_id().to_string();
    admin
        .cmd(&["CLIENT", "KILL", "ID", id.as_str()])
        .await
        .unwrap();
    assert_eq!(next(&mut rx).await, Invalidation::All(Why::SessionEnded));
    let second = session_after(&tracker, first.number()).await;
    assert_ne!(second.client_id(), first.client_id());
    // The new session's connections redirect to the new listener.
    let mut conn = second.pool().get().await.unwrap();
    conn.run(Cmd::get("fresh")).await.unwrap();
    admin.run(Cmd::set("fresh", "1")).await.unwrap();
    assert_eq!(
        next(&mut rx).await,
        Invalidation::Keys(vec![Bytes::from("fresh")])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_goes_silent_or_loses_its_server_ends_the_session() {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(&format!("127.0.0.1:{}", redis.port));
    let (tracker, mut rx) = start(config(proxy.addr()));
    let first = session_after(&tracker, 0).await;
    // Packets lost, nothing closed: only the missed heartbeat can tell.
    proxy.blackhole();
    assert_eq!(next(&mut rx).await, Invalidation::All(Why::SessionEnded));
    assert!(
        tracker
            .session()
            .is_none_or(|s| s.number() != first.number()),
        "the silent session is withdrawn"
    );
    proxy.pass();
    let second = session_after(&tracker, first.number()).await;

    // The server going away ends the session too.
    drop(redis);
    assert_eq!(next(&mut rx).await, Invalidation::All(Why::SessionEnded));
    assert!(tracker
        .session()
        .is_none_or(|s| s.number() != second.number()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resp3_connection_tracking_for_a_vanished_listener_is_told() {
    let redis = RedisServer::start();
    let mut cfg = config(format!("127.0.0.1:{}", redis.port));
    cfg.pool.protocol = Protocol::Resp3;
    // No new session while the test looks at the old one's connection.
    cfg.retry = Duration::from_secs(60);
    let (tracker, mut rx) = start(cfg);
    let session = session_after(&tracker, 0).await;
    let mut conn = session.pool().get().await.unwrap();
    conn.run(Cmd::get("k")).await.unwrap();
    assert!(!conn.tracking_redirect_broken());
    let mut admin = other_client(&redis).await;
    let id = session.client_id().to_string();
    admin
        .cmd(&["CLIENT", "KILL", "ID", id.as_str()])
        .await
        .unwrap();
    assert_eq!(next(&mut rx).await, Invalidation::All(Why::SessionEnded));
    // The invalidation has nowhere to go: the tracking connection gets the push.
    admin.run(Cmd::set("k", "changed")).await.unwrap();
    let mut told = false;
    for _ in 0..100 {
        assert_eq!(conn.cmd(&["PING"]).await.unwrap(), Frame::simple("PONG"));
        if conn.tracking_redirect_broken() {
            told = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(told, "no tracking-redir-broken push");
}
