"""Retrieval's Neo4j reads on the driver's async API, with the retrieval pipeline left as it is.

A live query is a few milliseconds of Neo4j reads between stretches of torch and NumPy: seeding,
each hop, the subgraph's features, the answer's names. ``Retriever.aretrieve_many`` runs that same
synchronous pipeline inside a greenlet (``greenlet_spawn``); each read it makes through
``AsyncReads`` hands its coroutine up to the event loop (``await_only``), which awaits it on an
``AsyncDriver`` while other requests run, and switches back with the rows. So a server answers
many questions at once, with no thread per request, and the pipeline is written once for both
APIs. The steps that compute for milliseconds (the question's embedding, the policy's ranking)
run on a pool of one thread per core (``run_blocking``), so concurrent requests still use every
core. This is how SQLAlchemy runs its synchronous ORM over asyncio drivers
(``sqlalchemy.ext.asyncio``), on the same ``greenlet`` library.

Outside ``greenlet_spawn`` (a plain ``retrieve``, a Retriever's construction, ``serve``'s warm-up)
``AsyncReads`` reads through the synchronous driver, exactly as a ``neo4j.Driver``.
"""
from __future__ import annotations

import asyncio
import functools
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import greenlet
from neo4j import AsyncDriver, Driver

T = TypeVar("T")


class _PipelineGreenlet(greenlet.greenlet):
    """A greenlet running synchronous code on behalf of a coroutine (its parent)."""


def on_event_loop() -> bool:
    """Whether the calling code runs inside ``greenlet_spawn`` (so ``await_only`` may be called)."""
    return isinstance(greenlet.getcurrent(), _PipelineGreenlet)


def await_only(awaitable: Awaitable[T]) -> T:
    """From synchronous code inside ``greenlet_spawn``: await ``awaitable`` on the event loop and
    return its result (or raise its error)."""
    current = greenlet.getcurrent()
    if not isinstance(current, _PipelineGreenlet):
        if asyncio.iscoroutine(awaitable):
            awaitable.close()  # never awaited: no "coroutine was never awaited" warning
        raise RuntimeError("await_only() outside greenlet_spawn(): call the async API from async code")
    return current.parent.switch(awaitable)


async def greenlet_spawn(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` run synchronously in a greenlet; each ``await_only`` it reaches is
    awaited here, on the event loop, while other tasks run."""
    child = _PipelineGreenlet(fn, greenlet.getcurrent())
    result = child.switch(*args, **kwargs)
    while not child.dead:
        try:
            value = await result
        except BaseException:  # the read's error goes back into fn, where it is raised and may be handled
            result = child.throw(*sys.exc_info())
        else:
            result = child.switch(value)
    return result


_CPU_POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="seeder-cpu")
"""One thread per core, shared by every request: torch and the encoder release the GIL, so the
CPU-bound steps of concurrent ``aretrieve`` calls use every core, as a server's thread pool did,
while the event loop goes on with the others' reads."""


def run_blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``. From code inside ``greenlet_spawn``, it runs on ``_CPU_POOL`` and is
    awaited on the event loop, so a long computation (the question's embedding, the policy's
    ranking) does not hold the loop; elsewhere it is simply called."""
    if not on_event_loop():
        return fn(*args, **kwargs)
    loop = asyncio.get_running_loop()
    return await_only(loop.run_in_executor(_CPU_POOL, functools.partial(fn, *args, **kwargs)))


async def _records(session, text: str, params: dict | None) -> list:
    result = await session.run(text, params)
    return [record async for record in result]


class _SessionInGreenlet:
    """The part of ``neo4j.Session`` the pipeline uses (``with ... as s: list(s.run(text, params))``),
    over an ``AsyncSession``."""

    def __init__(self, session):
        self._session = session

    def __enter__(self) -> "_SessionInGreenlet":
        await_only(self._session.__aenter__())
        return self

    def __exit__(self, *exc) -> bool | None:
        return await_only(self._session.__aexit__(*exc))

    def run(self, text: str, parameters: dict | None = None) -> list:
        return await_only(_records(self._session, text, parameters))


class AsyncReads:
    """What the retrieval pipeline reads Neo4j through (``LiveGraph.driver``): a ``neo4j.Driver``'s
    ``session``, ``execute_query`` and ``verify_connectivity``. Inside ``greenlet_spawn`` they run on
    the ``AsyncDriver`` of the running event loop (``async_driver(loop)``, opened on first use and
    kept per loop: an async driver's connections belong to one loop); elsewhere on ``driver``.

    ``async_driver``: a callable giving the loop's ``AsyncDriver``, or an ``AsyncDriver`` to use on
    whatever loop first awaits it."""

    def __init__(self, driver: Driver, async_driver: Callable[[], AsyncDriver] | AsyncDriver):
        self.sync = driver
        #: Whether the async drivers are this object's to close (it opened them) or the caller's.
        self.opened = callable(async_driver)
        self._open_async = async_driver if callable(async_driver) else (lambda: async_driver)
        self._per_loop: dict[asyncio.AbstractEventLoop, AsyncDriver] = {}
        self.async_statements = 0
        """How many statements ran on the async driver (what tests and benchmarks check)."""

    def async_driver(self) -> AsyncDriver:
        loop = asyncio.get_running_loop()
        driver = self._per_loop.get(loop)
        if driver is None:
            driver = self._per_loop[loop] = self._open_async()
        return driver

    def session(self, **config):
        if not on_event_loop():
            return self.sync.session(**config)
        self.async_statements += 1
        return _SessionInGreenlet(self.async_driver().session(**config))

    def execute_query(self, query_, parameters_: dict | None = None, **kwargs):
        if not on_event_loop():
            return self.sync.execute_query(query_, parameters_, **kwargs)
        self.async_statements += 1
        return await_only(self.async_driver().execute_query(query_, parameters_, **kwargs))

    def run_concurrently(self, calls: Sequence[Callable[[], T]], pool) -> list[T]:
        """The results of ``calls`` (each a synchronous function that reads), run side by side: as
        greenlets of one ``asyncio.gather`` on the event loop, else on ``pool``'s threads."""
        if not on_event_loop():
            return [f.result() for f in [pool.submit(call) for call in calls]]
        return await_only(asyncio.gather(*(greenlet_spawn(call) for call in calls)))

    def verify_connectivity(self, **config) -> None:
        if on_event_loop():
            return await_only(self.async_driver().verify_connectivity(**config))
        return self.sync.verify_connectivity(**config)

    def close(self) -> None:
        """Close the sync driver (as ``neo4j.Driver.close``); async ones are closed by ``aclose``."""
        self.sync.close()

    async def aclose(self) -> None:
        """Close the async driver of the running loop (the sync one belongs to whoever opened it;
        call this only for async drivers this object ``opened``)."""
        driver = self._per_loop.pop(asyncio.get_running_loop(), None)
        if driver is not None:
            await driver.close()
