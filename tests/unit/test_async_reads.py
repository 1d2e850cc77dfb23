"""The greenlet bridge that runs the synchronous retrieval pipeline with its Neo4j reads awaited on
the event loop (``graphstore.async_reads``), on stand-in drivers: results and errors cross it both
ways, calls interleave at their reads on one thread, reads go to the async driver only inside it,
and each event loop gets its own async driver."""
from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from seeder_dgl.graphstore.async_reads import AsyncReads, await_only, greenlet_spawn, on_event_loop


class Boom(Exception):
    pass


async def _value(v, delay=0.0):
    await asyncio.sleep(delay)
    return v


async def _fail():
    raise Boom("from the read")


def test_results_and_errors_cross_the_bridge_both_ways():
    def pipeline(a, b=0):
        assert on_event_loop()
        total = await_only(_value(a)) + await_only(_value(b))
        try:
            await_only(_fail())
        except Boom:  # a read's error is raised where the read was made, and can be handled there
            total += 100
        return total

    assert asyncio.run(greenlet_spawn(pipeline, 1, b=2)) == 103

    def failing():
        await_only(_value(1))
        raise Boom("from the pipeline")

    with pytest.raises(Boom, match="from the pipeline"):
        asyncio.run(greenlet_spawn(failing))
    assert not on_event_loop()


def test_await_only_outside_the_bridge_is_refused_without_leaking_the_coroutine(recwarn):
    with pytest.raises(RuntimeError, match="greenlet_spawn"):
        await_only(_value(1))
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_calls_interleave_at_their_reads_on_one_thread():
    events, threads = [], set()

    def pipeline(name):
        threads.add(threading.get_ident())
        events.append(f"{name} starts")
        await_only(_value(None, 0.05))
        events.append(f"{name} ends")
        return name

    async def both():
        return await asyncio.gather(greenlet_spawn(pipeline, "a"), greenlet_spawn(pipeline, "b"))

    assert asyncio.run(both()) == ["a", "b"]
    assert events == ["a starts", "b starts", "a ends", "b ends"]  # b ran while a waited
    assert len(threads) == 1


class FakeSession:
    def __init__(self, log, kind):
        self.log, self.kind = log, kind

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.log.append(f"{self.kind} closed")

    def run(self, text, params=None):
        self.log.append(f"{self.kind} {text}")
        return iter([{"text": text, "params": params}])


class FakeSyncDriver:
    def __init__(self, log):
        self.log = log

    def session(self, **config):
        return FakeSession(self.log, "sync")

    def execute_query(self, query, parameters=None, **kwargs):
        self.log.append(f"sync query {query}")
        return "sync result"


class FakeAsyncResult:
    def __init__(self, rows):
        self.rows = rows

    def __aiter__(self):
        self._it = iter(self.rows)
        return self

    async def __anext__(self):
        try:
            return next(self._it)
        except StopIteration:
            raise StopAsyncIteration from None


class FakeAsyncSession:
    def __init__(self, log):
        self.log = log

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.log.append("async closed")

    async def run(self, text, params=None):
        await asyncio.sleep(0.01)
        self.log.append(f"async {text}")
        return FakeAsyncResult([{"text": text, "params": params}])


class FakeAsyncDriver:
    def __init__(self, log):
        self.log, self.closed = log, False

    def session(self, **config):
        return FakeAsyncSession(self.log)

    async def execute_query(self, query, parameters=None, **kwargs):
        self.log.append(f"async query {query}")
        return "async result"

    async def close(self):
        self.closed = True


def _read(driver, text):
    with driver.session(database=None) as session:
        return list(session.run(text, {"x": 1}))


def test_reads_go_to_the_async_driver_inside_the_bridge_and_to_the_sync_one_elsewhere():
    log: list[str] = []
    opened: list[FakeAsyncDriver] = []

    def open_async():
        opened.append(FakeAsyncDriver(log))
        return opened[-1]

    reads = AsyncReads(FakeSyncDriver(log), open_async)
    assert _read(reads, "RETURN 1") == [{"text": "RETURN 1", "params": {"x": 1}}]
    assert reads.execute_query("RETURN 2") == "sync result"
    assert log == ["sync RETURN 1", "sync closed", "sync query RETURN 2"] and not opened
    log.clear()

    async def on_the_loop():
        rows = await greenlet_spawn(_read, reads, "RETURN 3")
        result = await greenlet_spawn(reads.execute_query, "RETURN 4")
        await reads.aclose()
        return rows, result

    assert asyncio.run(on_the_loop()) == ([{"text": "RETURN 3", "params": {"x": 1}}], "async result")
    assert log == ["async RETURN 3", "async closed", "async query RETURN 4"]
    assert reads.async_statements == 2 and len(opened) == 1 and opened[0].closed
    asyncio.run(on_the_loop())  # another loop: an async driver of its own
    assert len(opened) == 2 and opened[1].closed


def test_side_by_side_reads_run_together_on_the_loop_and_on_threads_elsewhere():
    log: list[str] = []
    reads = AsyncReads(FakeSyncDriver(log), lambda: FakeAsyncDriver(log))
    barrier = {"waiting": 0}

    def part(i):
        barrier["waiting"] += 1
        await_only(_value(None, 0.02))
        # Every part started before any finished its read: they ran side by side.
        assert barrier["waiting"] == 3
        return _read(reads, f"RETURN {i}")[0]["text"]

    async def on_the_loop():
        return await greenlet_spawn(reads.run_concurrently, [lambda i=i: part(i) for i in range(3)], None)

    assert asyncio.run(on_the_loop()) == ["RETURN 0", "RETURN 1", "RETURN 2"]
    with ThreadPoolExecutor(2) as pool:
        names = reads.run_concurrently([lambda i=i: (_read(reads, f"RETURN {i}"), threading.current_thread().name)[1]
                                        for i in range(3)], pool)
    assert all(name != threading.current_thread().name for name in names)
