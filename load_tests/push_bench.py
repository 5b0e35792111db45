"""Push subscriptions against a long-polling ``Consumer``, in one run against ``talos standalone`` (local disk).

    .venv/bin/python load_tests/push_bench.py [--latency-messages 2000] [--messages 50000] [--json]

1. Latency: one 100-byte message at a time (``acks=durable``), a few hundred a second. For each, the time
   from the producer's acknowledgement to the moment the subscriber (WebSocket push, acknowledging each
   message) or the consumer (``wait_ms`` long poll) has it, in the same process: p50, p99, max. Also from the
   send, which includes the producer's own round trip.
2. Throughput: MESSAGES messages of 100 bytes written first, then read to the end by one subscriber
   (window 1000, every message acknowledged, each acknowledgement written before it is confirmed) and by one
   consumer: messages per second and the ratio.

With ``--cluster``: a local cluster of three servers instead (ZooKeeper, storage on the local disk), and the
latency of a subscriber connected to the subscription's coordinator against one connected to another server,
which relays its pulls and acknowledgements to the coordinator (one HTTP hop): what addressing the
coordinator from the client would save.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from server.devservices import ClusterSettings, LocalCluster, StandaloneServer
from talos import Admin, Consumer, Producer, Subscriber


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(ordered[int(len(ordered) * 0.99)] * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def latency(url: str, topic: str, messages: int, receive: Callable[[Callable[[bytes], None]], None]) -> dict:
    """Produce one at a time; ``receive(on_value)`` runs in a thread and calls ``on_value`` per message."""
    arrived: dict[bytes, float] = {}
    done = threading.Event()

    def on_value(value: bytes) -> None:
        arrived[value] = time.perf_counter()
        if len(arrived) >= messages:
            done.set()

    reader = threading.Thread(target=receive, args=(on_value,), daemon=True)
    reader.start()
    time.sleep(1.0)  # connected and waiting
    sent: dict[bytes, tuple[float, float]] = {}
    with Producer(url, linger_ms=0) as producer:
        for i in range(messages):
            value = f"m{i:08d}".encode() + b"x" * 91
            started = time.perf_counter()
            producer.send(topic, value, partition=i % 2).result()
            sent[value] = (started, time.perf_counter())
            time.sleep(0.003)
    done.wait(timeout=60)
    from_ack = [max(0.0, arrived[v] - acked) for v, (_, acked) in sent.items() if v in arrived]
    from_send = [arrived[v] - started for v, (started, _) in sent.items() if v in arrived]
    return {
        "received": len(arrived),
        "from_ack": _percentiles(from_ack),
        "from_send": _percentiles(from_send),
        "delivered_before_ack": sum(1 for v, (_, a) in sent.items() if v in arrived and arrived[v] < a),
    }


def pushed(
    url: str, subscription: str, stop: threading.Event, *, follow: bool = True
) -> Callable[[Callable[[bytes], None]], None]:
    def receive(on_value: Callable[[bytes], None]) -> None:
        with Subscriber(url, subscription, window=100, follow_coordinator=follow) as subscriber:
            while not stop.is_set():
                message = subscriber.receive(timeout=0.5)
                if message is not None:
                    on_value(message.value or b"")
                    message.ack()

    return receive


def cluster_run(messages: int) -> dict[str, object]:
    """Direct to the coordinator against relayed by another server, on a local cluster of three."""
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="talos-push-cluster-") as tmp:
        settings = ClusterSettings(env={"TALOS_LOG_LEVEL": "warning"})
        cluster = LocalCluster(Path(tmp), servers=3, settings=settings, storage="file").start()
        os.environ["TALOS_TOKEN"] = str(cluster.settings.admin_token)
        try:
            url = cluster.servers[0].url
            with Admin(url) as admin:
                for name in ("direct", "relayed"):
                    admin.create_topic(name, partitions=2)
                    made = admin.create_subscription(name, name)
                    coordinator = str(made["coordinator"])
                    server = next(s for s in cluster.servers if (s.server_id == coordinator) == (name == "direct"))
                    stop = threading.Event()
                    try:
                        receive = pushed(server.url, name, stop, follow=name == "direct")
                        row = latency(server.url, name, messages, receive)
                    finally:
                        stop.set()
                    results[f"latency_{name}"] = {**row, "subscriber_at": server.server_id, "coordinator": coordinator}
        finally:
            cluster.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency-messages", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--cluster", action="store_true", help="direct against relayed, on a local cluster")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON document")
    args = parser.parse_args()
    if args.cluster:
        found = cluster_run(args.latency_messages)
        if args.json:
            print(json.dumps(found))
            return
        for name, row in found.items():
            assert isinstance(row, dict)
            where = f"subscriber at {row['subscriber_at']}, coordinator {row['coordinator']}"
            print(f"{name} ({where}): from ack {row['from_ack']}, from send {row['from_send']}")
        return
    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="talos-push-bench-") as tmp:
        server = StandaloneServer(Path(tmp) / "data", args=("--log-format", "text"), env={"TALOS_LOG_LEVEL": "warning"})
        server.start()
        stop = threading.Event()
        try:
            url = server.url
            with Admin(url) as admin:
                for topic in ("lat-push", "lat-poll", "bulk"):
                    admin.create_topic(topic, partitions=2)
                admin.create_subscription("lat", "lat-push")
                admin.create_subscription("bulk", "bulk", start="earliest")

            def poll(on_value: Callable[[bytes], None]) -> None:
                with Consumer(url, topics=["lat-poll"], start="latest", wait_ms=5000) as consumer:
                    while not stop.is_set():
                        for message in consumer.poll(timeout=0.5):
                            on_value(message.value or b"")

            results["latency_push"] = latency(url, "lat-push", args.latency_messages, pushed(url, "lat", stop))
            results["latency_consumer"] = latency(url, "lat-poll", args.latency_messages, poll)
            stop.set()

            with Producer(url) as producer:
                records = [b"b" * 100] * args.messages
                producer.send_many("bulk", records).result()
            started = time.perf_counter()
            count = 0
            with Subscriber(url, "bulk", window=1000) as subscriber:
                last = None
                while count < args.messages:
                    message = subscriber.receive(timeout=10)
                    if message is None:
                        break
                    last = message.ack()
                    count += 1
                if last is not None:
                    last.result(timeout=30)
            push_rate = count / (time.perf_counter() - started)
            started = time.perf_counter()
            read = 0
            with Consumer(url, topics=["bulk"], start="earliest") as consumer:
                while read < args.messages:
                    batch = consumer.poll(timeout=10)
                    if not batch:
                        break
                    read += len(batch)
            poll_rate = read / (time.perf_counter() - started)
            results["throughput"] = {
                "messages": args.messages,
                "subscriber_msgs_per_s": round(push_rate),
                "consumer_msgs_per_s": round(poll_rate),
                "subscriber_over_consumer": round(push_rate / poll_rate, 3),
            }
        finally:
            stop.set()
            server.stop()
    if args.json:
        print(json.dumps(results))
        return
    for name in ("latency_push", "latency_consumer"):
        row = results[name]
        assert isinstance(row, dict)
        print(
            f"{name}: received {row['received']}, from ack p50 {row['from_ack']['p50_ms']} ms "
            f"p99 {row['from_ack']['p99_ms']} ms max {row['from_ack']['max_ms']} ms; from send p50 "
            f"{row['from_send']['p50_ms']} ms p99 {row['from_send']['p99_ms']} ms "
            f"({row['delivered_before_ack']} arrived before the producer had its answer)"
        )
    print(f"throughput: {results['throughput']}")


if __name__ == "__main__":
    main()
