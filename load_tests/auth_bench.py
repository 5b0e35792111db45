"""What tenants and quotas cost on the hot path, in one run against ``talos standalone`` on the local disk.

    .venv/bin/python load_tests/auth_bench.py [--messages 100000] [--size 100] [--requests 3000]

Three servers, one after the other, same machine and data sizes:
1. auth off (the standalone default);
2. auth on, a tenant's token on every request (authentication, the ACL check, the tenant header);
3. auth on with tenant and topic quotas far above the load (token buckets on every request, never limiting).

Each runs a batching SDK producer (throughput, messages/s) and single-message HTTP requests from one
client (requests/s: the per-request overhead shows most there). Ratios are to auth off.
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
import time
from pathlib import Path

import httpx

from talos import Admin, Producer
from talos.devservices import StandaloneServer

ADMIN = f"bench-{secrets.token_urlsafe(16)}"


def batched(url: str, token: str, messages: int, size: int) -> float:
    value = b"v" * size
    with Producer(url, token=token, linger_ms=5) as producer:
        for i in range(2000):
            producer.send("bench", value, partition=i % 4)
        producer.flush()
        started = time.perf_counter()
        for i in range(messages):
            producer.send("bench", value, partition=i % 4)
        producer.flush()
        return messages / (time.perf_counter() - started)


def single(url: str, token: str, requests: int) -> float:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=url, headers=headers) as client:
        body = {"messages": [{"value": "x"}], "acks": "accepted"}
        for _ in range(200):
            client.post("/v1/topics/bench/partitions/0/messages", json=body).raise_for_status()
        started = time.perf_counter()
        for _ in range(requests):
            client.post("/v1/topics/bench/partitions/0/messages", json=body).raise_for_status()
        return requests / (time.perf_counter() - started)


def run(mode: str, base: Path, args: argparse.Namespace) -> tuple[float, float]:
    env = {"TALOS_ADMIN_TOKEN": ADMIN, "TALOS_AUTH": "off" if mode == "off" else "on", "TALOS_LOG_LEVEL": "warning"}
    server = StandaloneServer(base / mode / "data", env=env).start()
    try:
        with Admin(server.url, token=ADMIN) as admin:
            token = ""
            if mode != "off":
                admin.create_tenant("bench")
                token = admin.create_token("bench")["token"]
            with Admin(server.url, token=token or ADMIN) as owner:
                owner.create_topic("bench", partitions=4)
            if mode == "quotas":
                admin.set_quota(tenant="bench", produce_bytes_per_s=1e12, requests_per_s=1e9)
                admin.set_quota(topic="bench", produce_bytes_per_s=1e12, requests_per_s=1e9)
        return batched(server.url, token, args.messages, args.size), single(server.url, token, args.requests)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {mode: run(mode, Path(tmp), args) for mode in ("off", "on", "quotas")}
    base_batched, base_single = results["off"]
    print(f"{'mode':<8} {'batched msg/s':>14} {'ratio':>6} {'single req/s':>13} {'ratio':>6}")
    for mode, (rate, requests) in results.items():
        print(f"{mode:<8} {rate:>14,.0f} {rate / base_batched:>6.2f} {requests:>13,.0f} {requests / base_single:>6.2f}")


if __name__ == "__main__":
    main()
