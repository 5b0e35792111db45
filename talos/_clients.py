"""The two kinds of client, blocking and asyncio, and operations written once for both.

Every public client comes as a pair (``Admin``/``AsyncAdmin``, ``Producer``/``AsyncProducer``,
``Consumer``/``AsyncConsumer``). What differs between the two of a pair is only how they wait, so each is
built from:

* one base that holds the behaviour, written as steps (``talos._steps``), generic in the transport;
* :class:`Blocking` or :class:`Asynchronous`, which say how a transport is opened and steps are run.

A request-and-answer method is declared once on the base with :class:`operation`: on a blocking client it
is a plain method, on an asyncio client a coroutine method, each typed as such (``admin.create_topic(...)``
returns a ``TopicInfo``, ``await async_admin.create_topic(...)`` too).

Imports: ``talos._steps``, ``talos._tls`` and ``talos._transport`` only (and the standard library).
"""

from __future__ import annotations

import functools
import inspect
import types
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from talos._steps import Steps, run, run_async
from talos._tls import TLSOption, client_context
from talos._transport import (
    AiohttpTransport,
    AnyTransport,
    AsyncTransport,
    Transport,
    Urllib3Transport,
    authorized,
    authorized_async,
)

__all__ = ["Asynchronous", "Blocking", "ClientBase", "operation"]

P = ParamSpec("P")
R = TypeVar("R")
Owner = TypeVar("Owner")


class ClientBase(ABC, Generic[AnyTransport]):
    """What the base of a client pair builds on: a transport, opened by :class:`Blocking` or :class:`Asynchronous`
    (listed first among the twin's bases, so their ``_connect`` is the one used)."""

    _transport: AnyTransport

    @abstractmethod
    def _connect(
        self,
        transport: AnyTransport | None,
        token: str | None,
        timeout: float,
        pool_size: int = 16,
        tls: TLSOption = None,
    ) -> AnyTransport:
        """``transport`` or the default one (over ``tls``, else ``TALOS_CA_FILE`` ...: ``talos._tls``), sending the
        token (or ``TALOS_TOKEN``)."""


class Blocking:
    """A client that waits in the calling thread, over a :class:`Transport` (urllib3 by default)."""

    _transport: Transport

    def _connect(
        self,
        transport: Transport | None,
        token: str | None,
        timeout: float,
        pool_size: int = 16,
        tls: TLSOption = None,
    ) -> Transport:
        """``transport`` (default: a urllib3 pool of ``pool_size`` connections) sending the token."""
        if transport is None:
            transport = Urllib3Transport(pool_size=pool_size, timeout=timeout, ssl_context=client_context(tls))
        return authorized(transport, token)

    def _run(self, steps: Steps[R]) -> R:
        return run(steps, self._transport)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Asynchronous:
    """A client whose calls are awaited, over an :class:`AsyncTransport` (aiohttp by default)."""

    _transport: AsyncTransport

    def _connect(
        self,
        transport: AsyncTransport | None,
        token: str | None,
        timeout: float,
        pool_size: int = 16,
        tls: TLSOption = None,
    ) -> AsyncTransport:
        """``transport`` (default: an aiohttp session) sending the token. One event loop serves every
        request, so the pool is not sized by the caller's concurrency: ``pool_size`` is not used."""
        if transport is None:
            transport = AiohttpTransport(timeout=timeout, ssl_context=client_context(tls))
        return authorized_async(transport, token)

    async def _run(self, steps: Steps[R]) -> R:
        return await run_async(steps, self._transport)

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()


class operation(Generic[Owner, P, R]):  # a decorator: named like ``property``
    """A method written once as steps: a plain method on :class:`Blocking` clients, a coroutine method on
    :class:`Asynchronous` ones."""

    def __init__(self, steps: Callable[Concatenate[Owner, P], Steps[R]]) -> None:
        run_steps: Callable[..., Steps[R]] = steps

        def blocking(client: Blocking, *args: Any, **kwargs: Any) -> R:
            return client._run(run_steps(client, *args, **kwargs))

        async def awaited(client: Asynchronous, *args: Any, **kwargs: Any) -> R:
            return await client._run(run_steps(client, *args, **kwargs))

        signature = _method_signature(steps)
        for method in (blocking, awaited):
            functools.update_wrapper(method, steps)
            setattr(method, "__signature__", signature)  # what help() and IDEs show  # noqa: B010
        self._blocking, self._awaited = blocking, awaited
        self.__doc__ = steps.__doc__

    @overload
    def __get__(self, client: None, owner: type) -> Callable[..., Any]: ...

    @overload
    def __get__(self, client: Blocking, owner: type) -> Callable[P, R]: ...

    @overload
    def __get__(self, client: Asynchronous, owner: type) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, client: object, owner: type) -> object:
        method = self._awaited if issubclass(owner, Asynchronous) else self._blocking
        return method if client is None else types.MethodType(method, client)


def _method_signature(steps: Callable[..., Any]) -> inspect.Signature:
    """The signature of ``steps`` with the return type a caller gets: ``Steps[X]`` becomes ``X``."""
    signature = inspect.signature(steps)
    returns = signature.return_annotation
    if isinstance(returns, str) and returns.startswith("Steps[") and returns.endswith("]"):
        returns = returns[len("Steps[") : -1]
    return signature.replace(return_annotation=returns)
