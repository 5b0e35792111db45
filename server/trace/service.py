"""The message trace's background work on one server: the writer (events to ``__talos_trace``) and the
indexes of the trace partitions this server owns. The app starts it with the server and closes it last."""

from __future__ import annotations

import asyncio

from server.broker import Broker
from server.trace.keeper import TraceIndexes
from server.trace.writer import TraceWriter

__all__ = ["TraceService"]


class TraceService:
    def __init__(self, broker: Broker) -> None:
        self.writer = TraceWriter(broker, broker.trace)
        self.indexes = TraceIndexes(broker)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.writer.run()), loop.create_task(self.indexes.run())]

    async def close(self) -> None:
        """A last flush (a graceful stop loses no event), then the indexes' files."""
        for task in self._tasks:
            task.cancel()
        await self.writer.close()
        self.indexes.close()
