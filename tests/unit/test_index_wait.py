"""Waiting for an index: polled, so an interrupt is never held up by a server-side build, and
every way the wait can end is a one-line error or a return."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from seeder_dgl.graphstore.writer import GraphWriter, IngestError, _progress


class StateDriver:
    """Answers SHOW INDEXES with the next state of a scripted build; records the statements."""

    def __init__(self, states):
        self.states, self.statements = list(states), []

    def execute_query(self, text, database_=None, **params):
        self.statements.append(text)
        assert "SHOW INDEXES" in text and params == {"name": "KG_x_embedding"}
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        records = [] if state is None else [{"state": state[0], "populationPercent": state[1]}]
        return SimpleNamespace(records=records)


def writer(states) -> GraphWriter:
    w = GraphWriter.__new__(GraphWriter)  # no record lookup: only the wait is under test
    w.driver, w.database, w.dataset, w.label = StateDriver(states), None, "x", "KG_x"
    return w


def test_polls_until_online_and_never_blocks_in_the_server(monkeypatch):
    sleeps = []
    monkeypatch.setattr("seeder_dgl.graphstore.writer.time.sleep", sleeps.append)
    w = writer([("POPULATING", 10.0), ("POPULATING", 60.0), ("ONLINE", 100.0)])
    with _progress(True) as bars:  # the ingest's own progress display renders the wait
        w.wait_for_index("KG_x_embedding", bars, poll=0.25)
        bars.refresh()
        assert bars.tasks[0].completed == 100
    assert len(w.driver.statements) == 3 and sleeps == [0.25, 0.25]
    assert not any("awaitIndex" in s for s in w.driver.statements)


def test_an_interrupt_between_polls_stops_the_wait_at_once(monkeypatch):
    def interrupted(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr("seeder_dgl.graphstore.writer.time.sleep", interrupted)
    w = writer([("POPULATING", 5.0)])
    with pytest.raises(KeyboardInterrupt):
        w.wait_for_index("KG_x_embedding")
    assert len(w.driver.statements) == 1


@pytest.mark.parametrize("states, message", [
    ([("FAILED", 0.0)], "failed to build"),
    ([None], "does not exist"),
    ([("POPULATING", 40.0)], r"still POPULATING \(40%\) after 0 s"),
])
def test_every_other_ending_is_one_line(monkeypatch, states, message):
    monkeypatch.setattr("seeder_dgl.graphstore.writer.time.sleep", lambda s: None)
    with pytest.raises(IngestError, match=message) as info:
        writer(states).wait_for_index("KG_x_embedding", timeout=0.0)
    assert "\n" not in str(info.value)
