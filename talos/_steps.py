"""The SDK's behaviour written once, as steps: generators that yield what to do (an HTTP request or a
pause) and are sent back what happened, so the same code serves the blocking and the asyncio clients.

A behaviour (send a batch until it is answered, commit, join a group, fetch a partition) is a generator
``Steps[R]``: it yields :class:`Request` and :class:`Pause` values, receives each request's
:class:`Response` (or has the transport's exception raised at the ``yield``), and returns ``R``.
:func:`run` carries the steps out with a blocking :class:`Transport` and ``time.sleep``;
:func:`run_async` with an :class:`AsyncTransport` and ``asyncio.sleep``. Nothing else differs between
``Producer`` and ``AsyncProducer`` (or the consumers, the admins) but how they wait: threads or tasks.

Imports: ``talos._transport`` only (and the standard library).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Generic, TypedDict, TypeVar

from talos._transport import AsyncTransport, Response, Transport

__all__ = ["Pause", "Request", "Steps", "http", "pause", "run", "run_async"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request, as a transport's ``request`` takes it."""

    method: str
    url: str
    params: Mapping[str, str | int] | None = None
    body: bytes | None = None
    headers: Mapping[str, str] | None = None
    timeout: float | None = None

    def options(self) -> _Options:
        return {"params": self.params, "body": self.body, "headers": self.headers, "timeout": self.timeout}


class _Options(TypedDict):
    params: Mapping[str, str | int] | None
    body: bytes | None
    headers: Mapping[str, str] | None
    timeout: float | None


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait this long before the next step (the blocking client sleeps its thread, the asyncio one its task)."""

    seconds: float


Steps = Generator[Request | Pause, Response | None, R]


def http(request: Request) -> Steps[Response]:
    """The answer to ``request`` (its transport error raised here): ``answer = yield from http(...)``."""
    answer = yield request
    assert answer is not None  # a Request is always answered with a Response
    return answer


def pause(seconds: float) -> Steps[None]:
    yield Pause(seconds)


class _Driver(Generic[R]):
    """Advances the steps by what their last request returned or raised; what both runners share."""

    def __init__(self, steps: Steps[R]) -> None:
        self._steps = steps
        self._answer: Response | None = None
        self._error: Exception | None = None
        self.result: R

    def next(self) -> Request | Pause | None:
        """The next thing to do, or None when the steps returned (their value is then in ``result``)."""
        answer, error = self._answer, self._error
        self._answer, self._error = None, None
        try:
            return self._steps.throw(error) if error is not None else self._steps.send(answer)
        except StopIteration as done:
            self.result = done.value
            return None

    def answered(self, answer: Response) -> None:
        self._answer = answer

    def failed(self, error: Exception) -> None:
        self._error = error


def run(steps: Steps[R], transport: Transport) -> R:
    """Carry ``steps`` out in this thread."""
    driver = _Driver(steps)
    while (step := driver.next()) is not None:
        if isinstance(step, Pause):
            time.sleep(step.seconds)
            continue
        try:
            driver.answered(transport.request(step.method, step.url, **step.options()))
        except Exception as exc:  # raised into the steps, where the behaviour decides what it means
            driver.failed(exc)
    return driver.result


async def run_async(steps: Steps[R], transport: AsyncTransport) -> R:
    """Carry ``steps`` out in this task."""
    driver = _Driver(steps)
    while (step := driver.next()) is not None:
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
        else:
            try:
                driver.answered(await transport.request(step.method, step.url, **step.options()))
            except Exception as exc:  # see run()
                driver.failed(exc)
    return driver.result
