#!/usr/bin/env python3
"""Server CPU time per lease waiter, measured by hand against a running relcache.

    python3 scripts/lease_wait_cpu.py PORT SERVER_PID [ROUNDS]

Each round takes a fresh key's lease on one connection, parks 20 waiters on it
(`IDSET.MEXISTSBIN key ids LEASE BLOCK 10000`, one connection and thread each),
waits until INFO shows all 20 blocked, fills the key with IDSET.LOAD under the
lease, and checks every waiter's answer. It prints the server's user + system
time (from /proc/PID/stat, in clock ticks, so run enough rounds) divided by the
number of waiters: a waiter's request, its park and its wake-up, plus its share
of the holder's requests and of the INFO polls. Run it alternately against the
builds being compared. FLUSHALL first: it needs keys that do not exist.

Needs redis-py (`pip install redis`).
"""

import os
import struct
import sys
import threading
import time

import redis

WAITERS = 20
TICK = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main():
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 150
    ask = struct.pack("<4Q", 3, 2000, 999, 0)
    ids = struct.pack("<1000Q", *range(1, 1001))
    holder = redis.Redis(port=port)
    waiters = [redis.Redis(port=port) for _ in range(WAITERS)]
    for w in waiters:
        w.ping()
    holder.flushall()
    before = cpu_ticks(pid)
    for r in range(rounds):
        key = f"lease-wait-cpu:{r}"
        token = holder.execute_command("IDSET.MEXISTSBIN", key, ask, "LEASE")
        answers = []

        def wait(w):
            answers.append(
                w.execute_command("IDSET.MEXISTSBIN", key, ask, "LEASE", "BLOCK", 10000)
            )

        threads = [threading.Thread(target=wait, args=(w,)) for w in waiters]
        for t in threads:
            t.start()
        deadline = time.time() + 10
        while holder.info("clients")["blocked_clients"] < WAITERS:
            if time.time() > deadline:
                sys.exit(f"round {r}: the waiters never all parked")
            time.sleep(0.005)
        holder.execute_command("IDSET.LOAD", key, "LEASE", token, "PACKED", ids)
        for t in threads:
            t.join()
        # 3 and 999 are members, 2000 and 0 are not.
        assert answers == [b"\x05"] * WAITERS, answers[:3]
    spent = cpu_ticks(pid) - before
    per_waiter = spent * 1e9 / TICK / (rounds * WAITERS)
    print(f"{per_waiter:.0f} ns of server CPU per waiter, {rounds} rounds x {WAITERS}")


if __name__ == "__main__":
    main()
