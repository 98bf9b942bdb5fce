"""What redis-py users see of relcache (run by tests/compat.rs with a port).

Each check raises AssertionError with what went wrong; the script prints "ok" and
exits 0 only when every check passed, under RESP2 and RESP3 alike.
"""

import sys
import time

import redis


def check(port: int, protocol: int) -> None:
    r = redis.Redis(port=port, decode_responses=True, protocol=protocol)
    r.flushall()
    r.sadd("following:1", 10, 11, 12)

    # GET of a set: the WRONGTYPE error clients expect, not bytes that fail to decode.
    try:
        r.get("following:1")
    except redis.exceptions.ResponseError as e:
        assert str(e).startswith("WRONGTYPE"), e
    else:
        raise AssertionError("GET of a set did not raise WRONGTYPE")
    assert r.mget("following:1", "missing") == [None, None]

    # A member that is not an id is not a member.
    assert r.sismember("following:1", "abc") == 0
    assert r.sismember("following:1", 10) == 1
    assert r.smismember("following:1", ["abc", 11, "12", "x"]) == [0, 1, 1, 0]
    assert r.srem("following:1", "abc") == 0
    assert r.smove("following:1", "other", "abc") is False
    assert r.scard("following:1") == 3

    # Writes of a non-id still refuse it.
    try:
        r.sadd("following:1", "abc")
    except redis.exceptions.ResponseError as e:
        assert "is not a valid id" in str(e), e
    else:
        raise AssertionError("SADD of a non-id was accepted")

    # The table bytes are IDSET.TABLE's.
    raw = redis.Redis(port=port, protocol=protocol)
    table = raw.execute_command("IDSET.TABLE", "following:1")
    assert table[:6] == b"\x89RCIDS", table[:8]


def large_replies(port: int) -> None:
    """A pipeline of 270 GETs of 1 MB (redis-py writes them all, then reads): served
    whole with the default output limits, as Redis serves it."""
    r = redis.Redis(port=port)
    r.set("mb", b"v" * (1 << 20))
    pipe = r.pipeline(transaction=False)
    for _ in range(270):
        pipe.get("mb")
    replies = pipe.execute()
    assert len(replies) == 270, len(replies)
    assert all(len(v) == 1 << 20 for v in replies)
    assert r.ping()


def locks(port: int, protocol: int) -> None:
    """redis-py's Lock (SET NX PX, then EVALSHA scripts to extend and release) and
    a Redlock-style compare-and-delete through EVAL."""
    r = redis.Redis(port=port, decode_responses=True, protocol=protocol)
    r.delete("k", "redlock")
    with r.lock("k", timeout=5) as lock:
        assert r.get("k").encode() == lock.local.token, (r.get("k"), lock.local.token)
        assert lock.extend(10)
        assert 5000 < r.pttl("k") <= 15000, r.pttl("k")
        assert lock.reacquire()
    assert r.exists("k") == 0, "release left the lock behind"
    second = r.lock("k", timeout=5)
    assert second.acquire(blocking=False), "a second acquire after release failed"
    second.release()
    assert r.exists("k") == 0

    release = (
        "if redis.call('get', KEYS[1]) == ARGV[1] then "
        "return redis.call('del', KEYS[1]) else return 0 end"
    )
    assert r.set("redlock", "mine", nx=True, px=30000)
    assert not r.set("redlock", "theirs", nx=True, px=30000)
    assert r.eval(release, 1, "redlock", "theirs") == 0
    assert r.get("redlock") == "mine"
    assert r.eval(release, 1, "redlock", "mine") == 1
    assert r.exists("redlock") == 0


def pubsub(port: int, protocol: int) -> None:
    """redis-py's PubSub: confirmations, message and pmessage, PUBSUB NUMSUB, and
    nothing left behind once it closes."""
    r = redis.Redis(port=port, decode_responses=True, protocol=protocol)
    p = r.pubsub()
    p.subscribe("news")
    p.psubscribe("n*")
    confirmations = [p.get_message(timeout=5) for _ in range(2)]
    assert [(c["type"], c["channel"], c["data"]) for c in confirmations] == [
        ("subscribe", "news", 1),
        ("psubscribe", "n*", 2),
    ], confirmations
    assert r.publish("news", "hi") == 2
    got = [p.get_message(timeout=5) for _ in range(2)]
    assert {(m["type"], m["channel"], m["pattern"], m["data"]) for m in got} == {
        ("message", "news", None, "hi"),
        ("pmessage", "news", "n*", "hi"),
    }, got
    assert r.pubsub_numsub("news") == [("news", 1)]
    p.close()
    for _ in range(100):
        if r.pubsub_numsub("news") == [("news", 0)]:
            break
        time.sleep(0.05)
    assert r.publish("news", "gone") == 0


def client_side_cache(port: int) -> None:
    """redis-py's client-side cache (`cache_config`, RESP3): a repeated read is
    answered from the cache without reaching the server, and another client's
    write — IDSET.ADD to a follow set, SET — invalidates it at once."""
    from redis.cache import CacheConfig

    r = redis.Redis(port=port, protocol=3, cache_config=CacheConfig(), decode_responses=True)
    other = redis.Redis(port=port, decode_responses=True)
    other.delete("u:1:following", "csc:k")
    other.execute_command("IDSET.ADD", "u:1:following", 5, 6)
    other.set("csc:k", "1")

    def calls(name: str) -> int:
        stats = other.info("commandstats").get(f"cmdstat_{name}", {})
        return int(stats.get("calls", 0))

    assert r.sismember("u:1:following", 7) == 0
    assert r.get("csc:k") == "1"
    before = (calls("sismember"), calls("get"))
    for _ in range(5):
        assert r.sismember("u:1:following", 7) == 0
        assert r.get("csc:k") == "1"
    assert (calls("sismember"), calls("get")) == before, "served from the cache"
    assert r.get_cache().size >= 2

    other.execute_command("IDSET.ADD", "u:1:following", 7)
    other.set("csc:k", "2")
    # redis-py reads pending invalidations before each command it sends. The
    # invalidation is written by the reading client's own connection, on its own
    # thread, so on a loaded machine it can land a moment after the writer's
    # reply: wait for it (without it the cached answers would never change).
    deadline = time.monotonic() + 5
    while r.sismember("u:1:following", 7) != 1:
        assert time.monotonic() < deadline, "no invalidation for the idset"
        time.sleep(0.01)
    while r.get("csc:k") != "2":
        assert time.monotonic() < deadline, "no invalidation for the string"
        time.sleep(0.01)
    assert calls("sismember") == before[0] + 1, "re-read once, after the invalidation"
    r.close()


def keyspace_notifications(port: int, protocol: int) -> None:
    """The documented redis-py recipe: CONFIG SET notify-keyspace-events, then a
    PSUBSCRIBE to __keyspace@0__:* sees each write's event, idsets' included."""
    r = redis.Redis(port=port, decode_responses=True, protocol=protocol)
    r.config_set("notify-keyspace-events", "KA")
    assert r.config_get("notify-keyspace-events") == {"notify-keyspace-events": "AK"}
    try:
        p = r.pubsub(ignore_subscribe_messages=True)
        p.psubscribe("__keyspace@0__:user:*")
        p.get_message(timeout=5)  # the confirmation
        r.set("user:1:name", "ada")
        r.sadd("user:1:following", 2, 3)
        r.execute_command("IDSET.ADD", "user:1:following", "4")
        r.delete("user:1:name")
        got = []
        while len(got) < 4:
            m = p.get_message(timeout=5)
            assert m is not None, got
            got.append((m["channel"], m["data"]))
        assert got == [
            ("__keyspace@0__:user:1:name", "set"),
            ("__keyspace@0__:user:1:following", "sadd"),
            ("__keyspace@0__:user:1:following", "idset.add"),
            ("__keyspace@0__:user:1:name", "del"),
        ], got
        p.close()
    finally:
        r.config_set("notify-keyspace-events", "")


def main() -> None:
    port = int(sys.argv[1])
    for protocol in (2, 3):
        check(port, protocol)
        locks(port, protocol)
        pubsub(port, protocol)
        keyspace_notifications(port, protocol)
    large_replies(port)
    client_side_cache(port)
    print("ok")


if __name__ == "__main__":
    main()
