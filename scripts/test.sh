#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests drive (the real
# redis-cli, redis-benchmark and redis-server, and MariaDB for the relation tier's tests, which start
# their own servers), then runs formatting and lint checks and every test in the
# workspace. CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-benchmark >/dev/null 2>&1 || need+=(redis-tools)
# Tests that compare relcache's replies with Redis's start a real redis-server.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# tests/config.rs reads a listener's queue length with ss.
command -v ss >/dev/null 2>&1 || need+=(iproute2)
# The relation tier's tests start their own MariaDB (tests/harness/mariadb.rs).
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  # A package's postinst may fail to start its service where there is no init
  # (containers): the tests start their own servers, so what counts is that the
  # binaries are there, checked below.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null ||
    echo "== apt-get install reported an error; checking the binaries the tests need"
fi
for tool in redis-cli redis-benchmark redis-server ss; do
  command -v "$tool" >/dev/null 2>&1 || { echo "missing $tool (apt-get install redis-tools redis-server iproute2)"; exit 1; }
done
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] ||
  { echo "missing mariadbd (apt-get install mariadb-server)"; exit 1; }
# tests/python/clients.py checks what redis-py users see.
python3 -c 'import redis' 2>/dev/null || { echo "== pip install redis"; python3 -m pip install -q redis; }
python3 -c 'import redis' || { echo "missing redis-py (pip install redis)"; exit 1; }

# A run from a clean clone gains nothing from incremental compilation and would keep
# its caches, about 2 GB, on a disk CI fills easily. Set CARGO_INCREMENTAL=1 to keep
# them between runs (switching it rebuilds the workspace's own crates once).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
# Unit, integration and doc tests of every crate. Benchmarks are built (clippy above
# compiles every target) but run only by hand with `cargo bench`.
cargo test --workspace
echo "== cargo check server/fuzz"
# The server's fuzz targets live outside the workspace (FUZZING.md); checking them on
# stable keeps them compiling against the server's API. Shares the workspace's target.
(cd server/fuzz && CARGO_TARGET_DIR="$PWD/../../target" cargo check --locked)
