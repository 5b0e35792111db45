"""A Quix Streams application, run as its own process by the tests (so that it can be killed with SIGKILL): a count
per message key, kept in a RocksDB state store backed by its changelog topic (compacted, which Quix creates), each
new count sent to the output topic as ``{"key": KEY, "count": N, "run": RUN}``.

    python tests/frameworks/quix_app.py BOOTSTRAP GROUP INPUT OUTPUT STATE_DIR DELAY_S RUN [GUARANTEE]

``RUN`` names this run in every output record (``"run"``), so the test tells a restarted application's counts from
its first run's. ``DELAY_S``: a sleep per message, so that a run over a topic takes a while (the test kills it
midway). ``GUARANTEE`` is Quix's ``processing_guarantee``:

* ``at-least-once`` (Quix's default, and this script's): the consumed offsets are committed every half second, after
  the counts they produced are in the changelog and the output topic.
* ``exactly-once``: every half second one Kafka transaction holds the changelog's and the output topic's records
  and the consumed offsets (TxnOffsetCommit), committed together or not at all; Quix reads the changelog
  read_committed. Each run has a transactional.id of its own (Quix draws one at random), so a killed run's open
  transaction is closed by the server's transaction timeout: 10 s here (``FRAMEWORK_TRANSACTION_TIMEOUT_MS``)
  rather than librdkafka's 60 s, for the partitions it wrote stay unreadable past their last stable offset until
  then. librdkafka also bounds a transactional producer's message timeout by it: a message not acknowledged within
  it fails the transaction, and Quix stops (the test that restarts the server asks for more).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from quixstreams import Application, State
from quixstreams.app import ProcessingGuarantee

SESSION_MS = int(os.environ.get("FRAMEWORK_SESSION_TIMEOUT_MS", "6000"))
TRANSACTION_TIMEOUT_MS = int(os.environ.get("FRAMEWORK_TRANSACTION_TIMEOUT_MS", "10000"))
GUARANTEES = ("at-least-once", "exactly-once")


def main() -> None:
    bootstrap, group, input_name, output_name, state_dir, delay_s, run = sys.argv[1:8]
    asked = sys.argv[8] if len(sys.argv) > 8 else "at-least-once"
    if asked not in GUARANTEES:
        raise SystemExit(f"GUARANTEE: one of {', '.join(GUARANTEES)}, not {asked!r}")
    guarantee: ProcessingGuarantee = "exactly-once" if asked == "exactly-once" else "at-least-once"
    delay = float(delay_s)
    producer_config = {"transaction.timeout.ms": TRANSACTION_TIMEOUT_MS} if guarantee == "exactly-once" else {}
    app = Application(
        broker_address=bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        commit_interval=0.5,
        state_dir=state_dir,
        processing_guarantee=guarantee,
        loglevel="INFO",
        # the group moves on within seconds of a member's kill -9; the test that restarts the server asks for more
        consumer_extra_config={"session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500},
        producer_extra_config=producer_config,
    )
    source = app.topic(input_name, key_deserializer="str", value_deserializer="str")
    sink = app.topic(output_name, key_serializer="str", value_serializer="json")

    def count(_value: str, key: Any, _timestamp: int, _headers: Any, state: State) -> dict[str, Any]:
        time.sleep(delay)
        total = int(state.get("count", 0)) + 1
        state.set("count", total)
        return {"key": key, "count": total, "run": run}

    app.dataframe(source).apply(count, stateful=True, metadata=True).to_topic(sink)
    print(f"running {group} ({guarantee})", flush=True)
    app.run()


if __name__ == "__main__":
    main()
