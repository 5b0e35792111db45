"""The Kafka listener's frame reader (``server.kafka.frames``): frames come out whole and in order however the
bytes were cut into chunks; a frame inside one chunk is a view of it, one across chunks is joined once; a
connection that ends mid-frame is an incomplete read; reading pauses past twice the limit and resumes."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.kafka.frames import FrameReader


class _Transport:
    def __init__(self) -> None:
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=30),
)
def test_frames_come_out_whole_and_in_order_however_the_bytes_were_cut(frames: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)

    async def scenario() -> list[bytes]:
        reader = FrameReader(1 << 20, asyncio.get_running_loop())
        for chunk in _cut(stream, cuts):
            reader.feed_data(chunk)
        reader.feed_eof()
        out = []
        for _ in frames:
            size = int.from_bytes(await reader.readexactly(4), "big")
            out.append(bytes(await reader.readexactly(size)))
        assert reader.at_eof()
        return out

    assert asyncio.run(scenario()) == frames


def test_a_frame_inside_one_chunk_is_a_view_of_it_and_one_across_chunks_is_joined() -> None:
    async def scenario() -> None:
        reader = FrameReader(1 << 20, asyncio.get_running_loop())
        chunk = b"A" * 100 + b"B" * 50
        reader.feed_data(chunk)
        inside = await reader.readexactly(100)
        assert isinstance(inside, memoryview) and inside.obj is chunk and inside == b"A" * 100
        reader.feed_data(b"C" * 30)
        across = await reader.readexactly(80)
        assert bytes(across) == b"B" * 50 + b"C" * 30
        # Waits for bytes not yet there.
        waiting = asyncio.ensure_future(reader.readexactly(10))
        await asyncio.sleep(0)
        assert not waiting.done()
        reader.feed_data(b"0123456789")
        assert bytes(await waiting) == b"0123456789"

    asyncio.run(scenario())


def test_a_connection_that_ends_mid_frame_is_an_incomplete_read() -> None:
    async def scenario() -> None:
        reader = FrameReader(1 << 20, asyncio.get_running_loop())
        reader.feed_data(b"abc")
        reader.feed_eof()
        with pytest.raises(asyncio.IncompleteReadError) as ended:
            await reader.readexactly(10)
        assert (ended.value.partial, ended.value.expected) == (b"abc", 10)

    asyncio.run(scenario())


def test_reading_pauses_past_twice_the_limit_and_resumes_once_taken() -> None:
    async def scenario() -> None:
        reader = FrameReader(100, asyncio.get_running_loop())
        transport = _Transport()
        reader.set_transport(transport)  # type: ignore[arg-type]
        reader.feed_data(b"x" * 150)
        assert not transport.paused
        reader.feed_data(b"x" * 100)  # 250 > 2 x 100
        assert transport.paused
        await reader.readexactly(200)  # 50 left <= 100
        assert not transport.paused

    asyncio.run(scenario())
