"""A Faust application, run as its own process by the tests (so that it can be killed with SIGKILL): a count per
message key in a table held in memory (``store="memory://"``: nothing is kept locally, so every start rebuilds the
table from its changelog topic, compacted, which Faust creates), each new count sent to the output topic as
``{"key": KEY, "count": N, "run": RUN}``.

    python tests/frameworks/faust_app.py BOOTSTRAP APP_ID INPUT OUTPUT DATA_DIR DELAY_S RUN PARTITIONS

``RUN`` names this run in every output record (``"run"``), so the test tells a restarted application's counts from
its first run's. ``PARTITIONS``: the input topic's (the table's changelog gets as many). ``DELAY_S``: a sleep per
message, so that a run over a topic takes a while (the test kills it midway). Processing is
at least once (Faust's default): offsets are committed every half second, once the events before them are acked.

The run also writes two logs in ``DATA_DIR``, for the test to tell a loss inside Faust from one in the server:
``handed.jsonl``, ``{"partition": P, "offsets": [...]}`` for each batch of input records aiokafka hands to Faust,
and ``processed.jsonl``, ``{"partition": P, "offset": O}`` for each event the agent counts. Observation only (a
wrapper that returns what it is given): Faust 0.15 drops records it was handed when its recovery resumes the streams
(faust-streaming issue 596), and this is how the test sees it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import faust
from aiokafka.consumer.fetcher import Fetcher


def observe_handed(log: TextIO, topic: str) -> None:
    """Log the input records aiokafka hands to Faust (its consumer thread calls ``Fetcher.fetched_records``)."""
    fetched = Fetcher.fetched_records

    async def logged(self: Fetcher, *args: Any, **kwargs: Any) -> Any:
        records = await fetched(self, *args, **kwargs)
        for tp, batch in records.items():
            if tp.topic == topic and batch:
                log.write(json.dumps({"partition": tp.partition, "offsets": [r.offset for r in batch]}) + "\n")
        return records

    Fetcher.fetched_records = logged  # type: ignore[method-assign]


def main() -> None:
    bootstrap, app_id, input_name, output_name, data_dir, delay_s, run, partitions = sys.argv[1:9]
    delay = float(delay_s)
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=data_dir,
        topic_partitions=int(partitions),
        processing_guarantee="at_least_once",
        broker_commit_interval=0.5,
        # the group moves on within seconds of a member's kill -9; the test that restarts the server asks for more
        broker_session_timeout=int(os.environ.get("FRAMEWORK_SESSION_TIMEOUT_MS", "6000")) / 1000,
        broker_heartbeat_interval=0.5,
        consumer_auto_offset_reset="earliest",
    )
    # line-buffered: each line is in the kernel once written, so a kill -9 keeps it; one file per thread
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    observe_handed((Path(data_dir) / "handed.jsonl").open("a", buffering=1), input_name)
    log = (Path(data_dir) / "processed.jsonl").open("a", buffering=1)
    source = app.topic(input_name, key_serializer="raw", value_serializer="raw")
    sink = app.topic(output_name, key_serializer="raw", value_serializer="raw")
    counts = app.Table("counts", default=int)

    @app.agent(source)
    async def count(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            await asyncio.sleep(delay)
            key_bytes = event.key
            key = key_bytes.decode()
            log.write(json.dumps({"partition": event.message.partition, "offset": event.message.offset}) + "\n")
            counts[key] += 1
            await sink.send(key=key_bytes, value=json.dumps({"key": key, "count": counts[key], "run": run}).encode())

    print(f"running {app_id}", flush=True)
    # no web server: the worker's command line decides (its default binds port 6066 on every address)
    sys.argv = [sys.argv[0], "worker", "--loglevel", "info", "--without-web"]
    app.main()


if __name__ == "__main__":
    main()
