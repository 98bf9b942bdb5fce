"""What redis-py's RedisCluster sees of a relcache cluster (run by tests/cluster.rs
with the port of one node of a cluster redis-cli created).

Each check raises AssertionError with what went wrong; the script prints "ok" and
exits 0 only when every check passed, under RESP2 and RESP3 alike.
"""

import sys

import redis
from redis.cluster import RedisCluster


def check(port: int, protocol: int) -> None:
    rc = RedisCluster(host="127.0.0.1", port=port, decode_responses=True, protocol=protocol)
    assert len(rc.get_primaries()) == 3, rc.get_primaries()

    # Strings and sets spread over the nodes; each user's keys share a slot.
    for i in range(100):
        rc.set(f"p{protocol}:user:{i}", i)
        rc.sadd(f"{{p{protocol}:u{i}}}:following", i, i + 1, i + 2)
    for i in range(100):
        assert rc.get(f"p{protocol}:user:{i}") == str(i)
        key = f"{{p{protocol}:u{i}}}:following"
        assert rc.smismember(key, [i, i + 3, i + 2]) == [1, 0, 1]
        # relcache's own commands route by the key specs COMMAND reports.
        assert rc.execute_command("IDSET.ADD", key, i + 10) == 1
        assert rc.execute_command("IDSET.CARD", key) == 4
    sizes = [node.redis_connection.dbsize() for node in rc.get_primaries()]
    assert all(s > 0 for s in sizes) and sum(sizes) >= 200, sizes

    # Keys of two slots in one command are refused (by the client or the node).
    try:
        rc.execute_command("SINTER", f"p{protocol}:a", f"p{protocol}:b")
    except (redis.exceptions.RedisClusterException, redis.exceptions.ResponseError) as e:
        assert "slot" in str(e).lower(), e
    else:
        raise AssertionError("a cross-slot SINTER was served")

    # A slot moves behind the client's back: its next write meets MOVED and
    # follows it to the new owner.
    key = f"p{protocol}:moving"
    slot = rc.keyslot(key)
    old = rc.get_node_from_key(key)
    assert old.redis_connection.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    new = next(n for n in rc.get_primaries() if n.name != old.name)
    old_id = old.redis_connection.execute_command("CLUSTER", "MYID")
    new_id = new.redis_connection.execute_command("CLUSTER", "MYID")
    # redis-cli's order: the target imports, the source migrates (no keys to
    # move), then the target, the source and the others learn the new owner.
    new.redis_connection.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", old_id)
    old.redis_connection.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", new_id)
    ordered = [new, old] + [n for n in rc.get_primaries() if n.name not in (new.name, old.name)]
    for n in ordered:
        n.redis_connection.execute_command("CLUSTER", "SETSLOT", slot, "NODE", new_id)
    rc.set(key, "after the move")
    assert new.redis_connection.get(key) == "after the move"
    assert rc.get(key) == "after the move"


def main() -> None:
    port = int(sys.argv[1])
    for protocol in (2, 3):
        check(port, protocol)
    print("ok")


if __name__ == "__main__":
    main()
