"""One push subscriber as its own process, for the cluster tests: it logs (JSON lines, flushed) every message
it is handed and every acknowledgement it sends and gets confirmed, so a test can tell what was acknowledged
by whom after some of these processes were killed or paused.

    python -m tests.cluster.subscriber_process SUBSCRIPTION NAME LOG follow|relay URL [URL ...]

``relay``: stay connected to the server it reached first, which relays to the coordinator.

SIGTERM: stop taking messages, wait for the confirmations, close.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from typing import Any

from talos import Subscriber


def main() -> None:
    subscription, name, log_path, how, *urls = sys.argv[1:]
    out = open(log_path, "a", buffering=1)  # noqa: SIM115 - lives as long as the process
    lock = threading.Lock()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def log(event: str, **fields: object) -> None:
        with lock:
            out.write(json.dumps({"t": time.time(), "who": name, "event": event, **fields}) + "\n")

    follow = how == "follow"
    with Subscriber(urls, subscription, window=20, reconnect_backoff=0.2, follow_coordinator=follow) as subscriber:
        log("started")
        while not stop.is_set():
            message = subscriber.receive(timeout=0.2)
            if message is None:
                continue
            where = {"partition": message.partition, "offset": message.offset, "delivery": message.delivery}
            log("got", key=(message.key or b"").decode(), value=(message.value or b"").decode(), **where)
            time.sleep(0.002)  # the work
            log("ack", **where)

            def confirmed(future: Any, where: dict[str, int] = where) -> None:
                if future.exception() is None:
                    log("acked" if future.result() else "stale", **where)

            message.ack().add_done_callback(confirmed)
    log("stopped")


if __name__ == "__main__":
    main()
