"""Locust scenarios against the REST API: produce-only, consume-only and mixed traffic.

Run through ``load_tests/locust_run.py`` (headless, prints a summary, writes CSVs), or by hand:

    locust -f load_tests/locustfile.py --host http://127.0.0.1:8080 ProduceUser

Settings by environment: ``TALOS_LOAD_TOPIC`` (default ``load``), ``TALOS_LOAD_PARTITIONS`` (4),
``TALOS_LOAD_MESSAGE_BYTES`` (100), ``TALOS_LOAD_BATCH`` (messages per produce request, 1),
``TALOS_LOAD_ACKS`` (``durable``), ``TALOS_TOKEN`` (a bearer token, for servers with auth on).
"""

from __future__ import annotations

import itertools
import os
import random

from locust import FastHttpUser, constant, task

TOPIC = os.environ.get("TALOS_LOAD_TOPIC", "load")
PARTITIONS = int(os.environ.get("TALOS_LOAD_PARTITIONS", "4"))
SIZE = int(os.environ.get("TALOS_LOAD_MESSAGE_BYTES", "100"))
BATCH = int(os.environ.get("TALOS_LOAD_BATCH", "1"))
ACKS = os.environ.get("TALOS_LOAD_ACKS", "durable")
TOKEN = os.environ.get("TALOS_TOKEN", "")
HEADERS = {"content-type": "application/json", **({"authorization": f"Bearer {TOKEN}"} if TOKEN else {})}
_VALUE = "v" * SIZE
_BODY = '{"acks": "%s", "messages": [%s]}' % (ACKS, ", ".join(['{"value": "%s"}' % _VALUE] * BATCH))  # noqa: UP031
_users = itertools.count()


class _TalosUser(FastHttpUser):
    abstract = True
    wait_time = constant(0)  # closed loop: each user sends its next request when the last is answered

    def produce(self) -> None:
        partition = random.randrange(PARTITIONS)
        self.client.post(
            f"/v1/topics/{TOPIC}/partitions/{partition}/messages", data=_BODY, headers=HEADERS, name="produce"
        )

    def on_start(self) -> None:
        self.partition = next(_users) % PARTITIONS
        self.offset = 0

    def fetch(self) -> None:
        """Read the user's partition onwards; at its end, start over (the load stays a read load)."""
        path = f"/v1/topics/{TOPIC}/partitions/{self.partition}/messages"
        with self.client.get(
            f"{path}?offset={self.offset}&max_messages=100",
            headers=HEADERS,
            name="fetch",
            catch_response=True,
        ) as answer:
            if answer.status_code == 416:  # below the earliest offset (retention): jump to it
                self.offset = int(answer.json()["error"].get("earliest", 0))
                answer.success()
                return
            if answer.status_code != 200:
                answer.failure(f"{answer.status_code}: {answer.text[:200]}")
                return
            doc = answer.json()
            self.offset = doc["next_offset"] if doc["messages"] else 0


class ProduceUser(_TalosUser):
    """Produce only: one request per message (``TALOS_LOAD_BATCH`` per request)."""

    @task
    def send(self) -> None:
        self.produce()


class ConsumeUser(_TalosUser):
    """Consume only: fetches of up to 100 messages from one partition per user, over and over."""

    @task
    def read(self) -> None:
        self.fetch()


class MixedUser(_TalosUser):
    """Both: as many produce requests as fetches."""

    @task
    def send(self) -> None:
        self.produce()

    @task
    def read(self) -> None:
        self.fetch()
