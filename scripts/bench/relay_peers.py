"""Side-by-side drain: the `hare-outbox relay` daemon against txoutbox 0.2.2 (strict and
unordered) and pg-transactional-outbox 0.5.7, on the same backlog, in one run.

Each cell: a fresh schema, the system's own table filled with the backlog in one statement,
ANALYZE, then the system started as its own process (batch 100, concurrency 10, no-op
receiver; hare-outbox prints JSON lines to a file). The pending count is polled every 50 ms;
the rate is the events delivered between the first observed delivery and an empty backlog,
divided by that time (start-up is not counted, for anybody). Systems run in turn, round after
round, so a load change on the machine hits all of them.

Run it through scripts/bench_relay_peers.sh, which installs the peers and builds the daemon.
"""

import argparse
import asyncio
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import asyncpg

HERE = os.path.dirname(os.path.abspath(__file__))

WORKLOADS = {
    "100k/100 keys": (100_000, 100),
    "20k/1 key": (20_000, 1),
    "100k/no keys": (100_000, 0),
}


# A version-7 id for row g (time-ordered, as `enqueue` writes them): random v4 ids would scatter
# the unique index on id that every row write of the relay touches.
UUID_V7 = """encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
    placing substring(int8send(floor(extract(epoch from clock_timestamp()) * 1000)::bigint + g)
    from 3) from 1 for 6), 52, 1), 53, 1), 'hex')::uuid"""


def key_expr(keys: int) -> str:
    return "NULL" if keys == 0 else f"'k' || (g % {keys})"


class System:
    """What every system shares: how the drain reads its backlog. Counting every pending row
    each 50 ms would cost the server as much as a relay's lease, so the drain counts only until
    the first delivery, then asks whether any row is left."""

    async def pending(self, conn, schema):
        return await conn.fetchval(f"SELECT count(*) {self.pending_rows(schema)}")

    async def any_pending(self, conn, schema):
        return await conn.fetchval(f"SELECT EXISTS (SELECT 1 {self.pending_rows(schema)})")


class Hare(System):
    name = "hare-outbox relay"

    def __init__(self, args):
        self.args = args

    def url(self, workdir):
        return self.args.dsn

    def table(self, schema):
        return f"{schema}.outbox"

    def migrate(self, workdir, schema):
        subprocess.run(
            [self.args.hare, "--database-url", self.url(workdir), "--table", self.table(schema),
             "--log-level", "warn", "migrate"],
            check=True, stdout=subprocess.DEVNULL,
        )

    async def setup(self, conn, schema, events, keys, workdir):
        self.migrate(workdir, schema)
        await conn.execute(
            f"""INSERT INTO {schema}.outbox (id, topic, payload, ordering_key)
                SELECT {UUID_V7}, 'bench', jsonb_build_object('n', g), {key_expr(keys)}
                FROM generate_series(1, {events}) g"""
        )
        await conn.execute(f"ANALYZE {schema}.outbox")

    def pending_rows(self, schema):
        return f"FROM {schema}.outbox WHERE published_at IS NULL"

    def start(self, schema, workdir):
        config = os.path.join(workdir, "hare-outbox.toml")
        with open(config, "w") as f:
            f.write(
                f'database_url = "{self.url(workdir)}"\n'
                + getattr(self, "extra", "")
                + f'table = "{self.table(schema)}"\n'
                "[relay]\n"
                f"batch_size = {self.args.batch}\n"
                f"concurrency = {self.args.concurrency}\n"
                f"max_events_per_key = {self.args.max_events_per_key}\n"
                "poll_interval_seconds = 1\n"
                "backlog_interval_seconds = 0\n"
                '[delivery]\nkind = "stdout"\n'
            )
        out = open(os.path.join(workdir, "hare.jsonl"), "w")
        return subprocess.Popen(
            [self.args.hare, "--config", config, "--log-level", "warn", "relay"],
            stdout=out,
        )


class HareSync(Hare):
    """The daemon with database_synchronous_relay_commits = true: every lease and mark waits for
    the WAL flush."""

    name = "hare-outbox relay, sync commits"

    def start(self, schema, workdir):
        self.extra = "database_synchronous_relay_commits = true\n"
        return super().start(schema, workdir)


class HareSqlite(Hare):
    """The same daemon on a SQLite file (WAL) in the cell's folder; no peer runs on SQLite."""

    name = "hare-outbox relay, SQLite"

    def url(self, workdir):
        return f"sqlite:{os.path.join(workdir, 'outbox.db')}"

    def table(self, schema):
        return "outbox"

    async def setup(self, conn, schema, events, keys, workdir):
        self.migrate(workdir, schema)
        created = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        self.db = sqlite3.connect(os.path.join(workdir, "outbox.db"))
        self.db.executemany(
            "INSERT INTO outbox (id, topic, payload, ordering_key, created_at) VALUES (?, ?, ?, ?, ?)",
            ((str(uuid.uuid4()), "bench", f'{{"n":{g}}}', None if keys == 0 else f"k{g % keys}",
              created) for g in range(1, events + 1)),
        )
        self.db.commit()

    async def pending(self, conn, schema):
        return self.db.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone()[0]

    async def any_pending(self, conn, schema):
        return (await self.pending(conn, schema)) > 0


class Txoutbox(System):
    def __init__(self, args, mode):
        self.args, self.mode = args, mode
        self.name = f"txoutbox 0.2.2 {mode}"

    async def setup(self, conn, schema, events, keys, workdir):
        # The library's own DDL (PostgresStorage.schema_sql) for SCHEMA.outbox.
        ddl = subprocess.run(
            [self.args.python, "-c",
             "import asyncio,sys\n"
             "from txoutbox.adapters.postgres import PostgresStorage\n"
             "print(PostgresStorage(None, table='outbox', schema=sys.argv[1]).schema_sql())",
             schema],
            check=True, capture_output=True, text=True,
        ).stdout
        await conn.execute(ddl)
        await conn.execute(
            f"""INSERT INTO {schema}.outbox (topic, key, payload)
                SELECT 'bench', {key_expr(keys)}, convert_to('{{"n":' || g || '}}', 'UTF8')
                FROM generate_series(1, {events}) g"""
        )
        await conn.execute(f"ANALYZE {schema}.outbox")

    def pending_rows(self, schema):
        return f"FROM {schema}.outbox WHERE status = 'pending'"

    def start(self, schema, workdir):
        return subprocess.Popen(
            [self.args.python, os.path.join(HERE, "txoutbox_drain.py"), self.args.dsn, schema,
             self.mode, str(self.args.batch), str(self.args.concurrency)],
        )


class Pgto(System):
    name = "pg-transactional-outbox 0.5.7"

    def __init__(self, args):
        self.args = args

    def node(self, *argv, **kw):
        env = dict(os.environ, NODE_PATH=os.path.join(self.args.node_dir, "node_modules"))
        return [self.args.node, os.path.join(HERE, "pgto_drain.js"), *argv], env

    async def setup(self, conn, schema, events, keys, workdir):
        cmd, env = self.node("setup", schema)
        ddl = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        # Its index names are not schema-qualified in DROP INDEX: search_path makes them local.
        await conn.execute(f"SET search_path = {schema}")
        await conn.execute(ddl)
        await conn.execute("RESET search_path")
        await conn.execute(
            f"""INSERT INTO {schema}.outbox
                  (id, aggregate_type, aggregate_id, message_type, segment, concurrency, payload)
                SELECT gen_random_uuid(), 'bench', g::text, 'bench', {key_expr(keys)},
                       {"'parallel'" if keys == 0 else "'sequential'"}, jsonb_build_object('n', g)
                FROM generate_series(1, {events}) g"""
        )
        await conn.execute(f"ANALYZE {schema}.outbox")

    def pending_rows(self, schema):
        return f"FROM {schema}.outbox WHERE processed_at IS NULL AND abandoned_at IS NULL"

    def start(self, schema, workdir):
        a = self.args
        cmd, env = self.node("drain", schema, str(a.batch), a.pg_host, a.pg_port, a.pg_user,
                             a.pg_db)
        return subprocess.Popen(cmd, env=env)


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU seconds of one process and its live threads (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def postgres_cpu_seconds():
    """CPU seconds of every live PostgreSQL server process (backends, WAL writer, checkpointer)."""
    total = 0.0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() != "postgres":
                        continue
            except OSError:
                continue
            total += cpu_seconds(entry)
    return total


async def drain(conn, system, events, keys, timeout):
    """Drains one backlog; returns (events/s, CPU µs per event of the system's process, of the
    PostgreSQL server), both CPU figures measured from the first delivery to the end."""
    schema = f"hare_peers_{uuid.uuid4().hex[:8]}"
    await conn.execute(f"CREATE SCHEMA {schema}")
    try:
        with tempfile.TemporaryDirectory() as workdir:
            await system.setup(conn, schema, events, keys, workdir)
            proc = system.start(schema, workdir)
            try:
                first, first_left = None, None
                deadline = time.monotonic() + timeout
                now = time.monotonic()
                while True:
                    if first is None:
                        left = await system.pending(conn, schema)
                    else:
                        left = 1 if await system.any_pending(conn, schema) else 0
                    now = time.monotonic()
                    if first is None and left < events:
                        first, first_left = now, left
                        cpu0 = (cpu_seconds(proc.pid), postgres_cpu_seconds())
                    if left == 0:
                        own = (cpu_seconds(proc.pid) - cpu0[0]) * 1e6 / first_left
                        pg = (postgres_cpu_seconds() - cpu0[1]) * 1e6 / first_left
                        rate = first_left / (now - first) if now > first else float("nan")
                        return rate, own, pg
                    if now > deadline or proc.poll() is not None:
                        left = await system.pending(conn, schema)
                        state = "exited" if proc.poll() is not None else "timed out"
                        print(f"  {system.name}: {state} after {events - left} of {events} events",
                              file=sys.stderr)
                        if first is None or now == first or first_left == left:
                            return 0.0, float("nan"), float("nan")
                        done = first_left - left
                        own = (cpu_seconds(proc.pid) - cpu0[0]) * 1e6 / done
                        pg = (postgres_cpu_seconds() - cpu0[1]) * 1e6 / done
                        return done / (now - first), own, pg
                    await asyncio.sleep(0.05)
            finally:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    finally:
        await conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsn", default="postgres://postgres@127.0.0.1:5432/test")
    p.add_argument("--hare", required=True, help="the hare-outbox binary")
    p.add_argument("--python", required=True, help="python of the venv holding txoutbox")
    p.add_argument("--node", default="node")
    p.add_argument("--node-dir", required=True, help="folder whose node_modules holds pgto")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--max-events-per-key", type=int, default=100)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per cell at most")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--systems", default="hare,txoutbox-strict,txoutbox-unordered,pgto",
                   help="comma-separated: hare, hare-sync, hare-sqlite, txoutbox-strict, "
                        "txoutbox-unordered, pgto; ratios are to the first")
    a = p.parse_args()
    a.pg_host, a.pg_port, a.pg_user, a.pg_db = "127.0.0.1", "5432", "postgres", "test"
    rest = a.dsn.split("://", 1)[1]
    if "@" in rest:
        a.pg_user, rest = rest.split("@", 1)
    hostport, a.pg_db = rest.split("/", 1)
    a.pg_host, _, port = hostport.partition(":")
    a.pg_port = port or "5432"

    makers = {
        "hare": lambda: Hare(a),
        "hare-sqlite": lambda: HareSqlite(a),
        "hare-sync": lambda: HareSync(a),
        "txoutbox-strict": lambda: Txoutbox(a, "strict"),
        "txoutbox-unordered": lambda: Txoutbox(a, "unordered"),
        "pgto": lambda: Pgto(a),
    }
    systems = [makers[s]() for s in a.systems.split(",")]
    conn = await asyncpg.connect(a.dsn)
    load = os.getloadavg()[0]
    print(f"relay peers: batch {a.batch}, concurrency {a.concurrency}, {a.rounds} rounds, "
          f"load average {load:.2f} at the start", flush=True)
    results = {}
    for wl in a.workloads.split(","):
        events, keys = WORKLOADS[wl]
        for r in range(a.rounds):
            for s in systems:
                rate, own, pg = await drain(conn, s, events, keys, a.timeout)
                results.setdefault((wl, s.name), []).append(rate)
                print(f"  {wl:<14} round {r + 1}  {s.name:<32} {rate:>9.0f} events/s   "
                      f"CPU µs/event: own {own:.1f} + PostgreSQL {pg:.1f}", flush=True)
    await conn.close()
    print()
    print(f"{'workload':<15} {'system':<32} {'events/s (each round)':<24} {'× hare':>7}")
    for wl in a.workloads.split(","):
        base = statistics.median(results[(wl, systems[0].name)])
        for s in systems:
            rates = results[(wl, s.name)]
            med = statistics.median(rates)
            shown = " / ".join(f"{x:.0f}" for x in rates)
            ratio = med / base if base else float("nan")
            print(f"{wl:<15} {s.name:<32} {shown:<24} {ratio:>7.2f}")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    asyncio.run(main())
