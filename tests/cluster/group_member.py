"""One consumer-group member as its own process, for the cluster tests: it logs (JSON lines, flushed) when
it starts and stops holding each partition and every message it processes, and commits after each poll.

    python -m tests.cluster.group_member URL GROUP TOPIC NAME LOG SESSION_S

SIGTERM: stop consuming, commit, leave the group.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time

from talos import Consumer, TalosError


def main() -> None:
    url, group, topic, name, log_path, session = sys.argv[1:7]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def log(event: str, **fields: object) -> None:
        out.write(json.dumps({"t": time.time(), "member": name, "event": event, **fields}) + "\n")

    held: set[tuple[str, int]] = set()

    def holding(event: str) -> object:
        def logged(tps: list[tuple[str, int]]) -> None:
            for t, p in tps:
                log(event, topic=t, partition=p)
                if event == "hold":
                    held.add((t, p))
                else:
                    held.discard((t, p))

        return logged

    with Consumer(
        url,
        group=group,
        topics=[topic],
        instance=name,
        session_timeout_s=float(session),
        auto_commit=False,
        wait_ms=200,
        on_assign=holding("hold"),  # type: ignore[arg-type]
        on_revoke=holding("release"),  # type: ignore[arg-type]
        on_lost=holding("release"),  # type: ignore[arg-type]
    ) as consumer:
        log("joined")
        while not stop.is_set():
            batch = consumer.poll(0.3)
            for message in batch:
                log(
                    "msg",
                    topic=message.topic,
                    partition=message.partition,
                    offset=message.offset,
                    value=(message.value or b"").decode(),
                )
            if batch:
                try:
                    consumer.commit()
                except TalosError as exc:
                    log("commit-failed", error=str(exc))
        # What it logged as held, not ``consumer.assignment``: a lease that ran out since the last poll has left
        # the assignment without on_lost having run (it runs in a poll), and would never be logged released.
        for t, p in sorted(held):
            log("release", topic=t, partition=p)
    log("left")


if __name__ == "__main__":
    main()
