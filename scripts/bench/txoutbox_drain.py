"""Drains a txoutbox 0.2.2 table with a no-op publisher until killed.

Usage: txoutbox_drain.py DSN SCHEMA strict|unordered BATCH CONCURRENCY
Started by relay_peers.py, which fills the table, times the drain and kills this process.
"""

import asyncio
import sys
from datetime import timedelta

from txoutbox import Relay, RelayConfig
from txoutbox.adapters.postgres import PostgresStorage


async def main() -> None:
    dsn, schema, mode, batch, concurrency = sys.argv[1:6]
    storage = await PostgresStorage.connect(
        dsn,
        table="outbox",
        schema=schema,
        strict_ordering=(mode == "strict"),
        min_size=2,
        max_size=int(concurrency) + 2,
    )

    async def publish(_message) -> None:
        return None

    config = RelayConfig(
        batch_size=int(batch),
        concurrency=int(concurrency),
        lease=timedelta(seconds=60),
        poll_min=0.05,
        poll_max=1.0,
    )
    await Relay(storage, publish, config=config).run(handle_signals=True)


if __name__ == "__main__":
    asyncio.run(main())
