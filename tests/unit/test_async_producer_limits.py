"""The asyncio producer takes the blocking one's limits: ``max_in_flight`` caps the batches sent at once and
``buffer_bytes`` makes ``send`` wait while that much is queued. The network is a transport that holds every
produce request until the test lets it go."""

from __future__ import annotations

import asyncio
from typing import Unpack

import orjson
import pytest

from talos import AsyncProducer, Response, decode_records
from talos._transport import RequestOptions

PARTITIONS = 6


class HeldPartitions:
    """Answers routes at once and holds produce requests until ``release`` is set; counts how many are
    held at the same time."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = 0
        self.most_held = 0
        self.stored: list[bytes] = []

    async def request(self, method: str, url: str, **options: Unpack[RequestOptions]) -> Response:
        if url.endswith("/v1/routes"):
            topics = {"t": [{"partition": p} for p in range(PARTITIONS)]}
            return Response(200, {}, orjson.dumps({"mode": "standalone", "topics": topics}))
        body = options.get("body")
        assert isinstance(body, bytes)
        self.held += 1
        self.most_held = max(self.most_held, self.held)
        await self.release.wait()
        self.held -= 1
        values = [r.value or b"" for r in decode_records(body)]
        base = len(self.stored)
        self.stored += values
        result = {"partition": 0, "offset": base, "count": len(values), "durable_offset": base + len(values)}
        return Response(200, {}, orjson.dumps({"results": [result]}))

    async def close(self) -> None:
        pass


def test_max_in_flight_caps_the_batches_sent_at_once() -> None:
    async def scenario() -> HeldPartitions:
        network = HeldPartitions()
        producer = AsyncProducer("http://held", transport=network, linger_ms=0, max_in_flight=2)
        futures = [await producer.send("t", b"m", partition=p) for p in range(PARTITIONS)]
        await asyncio.sleep(0.2)  # every partition's batch is ready; only two may be on the wire
        assert network.held == 2
        network.release.set()
        await asyncio.gather(*futures)
        await producer.close()
        return network

    network = asyncio.run(scenario())
    assert network.most_held == 2
    assert len(network.stored) == PARTITIONS


def test_send_waits_while_buffer_bytes_are_queued() -> None:
    async def scenario() -> HeldPartitions:
        network = HeldPartitions()
        producer = AsyncProducer("http://held", transport=network, linger_ms=0, buffer_bytes=1_000)
        first = await producer.send("t", b"x" * 2_000, partition=0)  # over the buffer on its own: queued
        with pytest.raises(TimeoutError):  # nothing is answered, so there is no room for more
            await asyncio.wait_for(producer.send("t", b"y", partition=1), 0.3)
        network.release.set()
        await first
        second = await asyncio.wait_for(producer.send("t", b"z", partition=1), 5)
        await second
        await producer.close()
        return network

    network = asyncio.run(scenario())
    assert sorted(network.stored) == [b"x" * 2_000, b"z"]
