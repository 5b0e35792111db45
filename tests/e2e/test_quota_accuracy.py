"""Rate quotas measured against a real server over 30 s: what gets through stays within ±10 % of the limit
(Pulsar users report 1 MB/s limits letting 11.9 MB/s through). Clients push far harder than the limit and
back off by what the 429s tell them: the SDK's producer and consumer, and a plain HTTP loop that obeys
``Retry-After``."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import httpx
import pytest

from server.devservices import StandaloneServer
from talos import Admin, Consumer, Producer
from tests.helpers import running_standalone

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # rates measured against the clock

ADMIN_TOKEN = f"admin-{secrets.token_urlsafe(24)}"
SECONDS = 30.0
BYTES_LIMIT = 256 * 1024  # produce bytes/s of one topic
REQUESTS_LIMIT = 40.0  # requests/s of another
FETCH_LIMIT = 128 * 1024  # fetch bytes/s of a third


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneServer, str]]:
    data: Path = tmp_path_factory.mktemp("quota") / "data"
    with (
        running_standalone(data, env={"TALOS_ADMIN_TOKEN": ADMIN_TOKEN, "TALOS_AUTH": "on"}) as running,
        Admin(running.url, token=ADMIN_TOKEN) as admin,
    ):
        admin.create_tenant("load")
        token = admin.create_token("load")["token"]
        with Admin(running.url, token=token) as tenant:
            for name in ("bytes", "requests", "reads"):
                tenant.create_topic(name, partitions=2)
        admin.set_quota(topic="bytes", produce_bytes_per_s=BYTES_LIMIT)
        admin.set_quota(topic="requests", requests_per_s=REQUESTS_LIMIT)
        admin.set_quota(topic="reads", fetch_bytes_per_s=FETCH_LIMIT)
        yield running, token


def produce_bytes(url: str, token: str, out: dict[str, float]) -> None:
    """The SDK producer batching 4 KiB messages (up to 1 MiB a batch, four seconds of the limit), 64
    outstanding: far more than the limit allows."""
    value = b"v" * 4096
    acked = 0
    pending: list[Future[object]] = []
    with Producer(url, token=token, max_in_flight=8) as producer:
        started = time.monotonic()
        deadline = started + SECONDS
        while time.monotonic() < deadline:
            pending.append(producer.send("bytes", value, partition=len(pending) % 2))  # type: ignore[arg-type]
            if len(pending) >= 64:
                pending.pop(0).result(60)
                if time.monotonic() <= deadline:
                    acked += len(value)
        out["elapsed"] = time.monotonic() - started
        for future in pending:
            future.result(120)  # every message gets through in the end: backed off, never dropped
    out["bytes"] = acked


def hammer_requests(url: str, token: str, out: dict[str, float]) -> None:
    """A plain HTTP client: four threads, each sleeping what Retry-After / retry_after_ms says after a 429."""
    admitted = 0
    refused = 0
    lock = threading.Lock()
    deadline = time.monotonic() + SECONDS

    def worker() -> None:
        nonlocal admitted, refused
        with httpx.Client(base_url=url, headers={"authorization": f"Bearer {token}"}, timeout=30) as client:
            while time.monotonic() < deadline:
                answer = client.post("/v1/topics/requests/messages", json={"messages": [{"value": "r"}]})
                with lock:
                    if answer.status_code == 200:
                        admitted += 1 if time.monotonic() <= deadline else 0
                        continue
                    assert answer.status_code == 429, answer.text
                    assert answer.headers["retry-after"].isdigit()
                    refused += 1
                time.sleep(answer.json()["error"]["retry_after_ms"] / 1000)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out["admitted"] = admitted
    out["refused"] = refused


def consume_bytes(url: str, token: str, out: dict[str, float]) -> None:
    """The SDK consumer reading a topic holding far more than the limit lets through in 30 s."""
    got = 0
    with Consumer(url, topics=["reads"], token=token, start="earliest", wait_ms=100) as consumer:
        deadline = time.monotonic() + SECONDS
        while time.monotonic() < deadline:
            got += sum(len(m.value or b"") for m in consumer.poll(0.5))
    out["bytes"] = got


def test_admitted_rates_stay_within_ten_percent_of_the_limits(server: tuple[StandaloneServer, str]) -> None:
    running, token = server
    with Producer(running.url, token=ADMIN_TOKEN) as loader:  # the admin is not limited; batches up to 1 MiB
        for i in range(2000):
            loader.send("reads", b"r" * 4096, partition=i % 2)
    produced: dict[str, float] = {}
    requested: dict[str, float] = {}
    consumed: dict[str, float] = {}
    threads = [
        threading.Thread(target=produce_bytes, args=(running.url, token, produced)),
        threading.Thread(target=hammer_requests, args=(running.url, token, requested)),
        threading.Thread(target=consume_bytes, args=(running.url, token, consumed)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    byte_rate = produced["bytes"] / SECONDS
    request_rate = requested["admitted"] / SECONDS
    fetch_rate = consumed["bytes"] / SECONDS
    print(
        f"produce {byte_rate / 1024:.1f} KiB/s of {BYTES_LIMIT / 1024:.0f} ({byte_rate / BYTES_LIMIT:.3f}); "
        f"requests {request_rate:.1f}/s of {REQUESTS_LIMIT:.0f} ({request_rate / REQUESTS_LIMIT:.3f}), "
        f"{requested['refused']:.0f} refused; "
        f"fetch {fetch_rate / 1024:.1f} KiB/s of {FETCH_LIMIT / 1024:.0f} ({fetch_rate / FETCH_LIMIT:.3f})"
    )
    assert abs(byte_rate / BYTES_LIMIT - 1) <= 0.10
    assert abs(request_rate / REQUESTS_LIMIT - 1) <= 0.10
    assert requested["refused"] > 0  # the client really asked for more than it got
    assert abs(fetch_rate / FETCH_LIMIT - 1) <= 0.10
