"""One writer per dataset, against the real server: a second ingest of the same dataset while the
first runs is refused in one line and writes nothing (before the lease, two ingests at once wrote
every relationship twice); a lease left by a process that is gone is taken over at once, one from
another host only when it lapses; a writer whose lease was taken over cannot commit another batch."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from seeder_dgl.graphstore.lease import DatasetBusy
from seeder_dgl.graphstore.writer import GraphWriter, undirected_unique
from seeder_dgl.graphstore.writer import dataset_label as label_for
from tests.helpers.graphs import random_embeddings, random_kg

NODES, EDGES = 2000, 12000


def _counts(driver, label):
    nodes = driver.execute_query(f"MATCH (n:{label}) RETURN count(n) AS c").records[0]["c"]
    rels = driver.execute_query(f"MATCH (:{label})-[r]->(:{label}) RETURN count(r) AS c").records[0]["c"]
    return nodes, rels


def _ingest(driver, name, **batches):
    kg = random_kg(name, NODES, EDGES, seed=7)
    writer = GraphWriter(driver, name, **batches)
    return writer.ingest(kg, random_embeddings(NODES, seed=7), random_embeddings(4, seed=8), "m", progress=False)


def _expected(name):
    kg = random_kg(name, NODES, EDGES, seed=7)
    return NODES, len(undirected_unique(kg.edge_src, kg.edge_dst, kg.edge_rel))


def _lease(driver, name):
    rows = driver.execute_query("MATCH (l:SeederLease {name: $n}) RETURN l.owner AS owner", n=name).records
    return rows[0]["owner"] if rows else None


def test_a_second_writer_is_refused_while_the_first_writes(neo4j_driver, dataset_label):
    name = dataset_label
    first: dict = {}

    def run_first():
        try:
            first["summary"] = _ingest(neo4j_driver, name, node_batch=40, relationship_batch=150)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            first["error"] = exc

    thread = threading.Thread(target=run_first)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while _lease(neo4j_driver, name) is None and thread.is_alive():
            assert time.monotonic() < deadline, "the first ingest never took its lease"
            time.sleep(0.02)
        with pytest.raises(DatasetBusy) as refused:
            _ingest(neo4j_driver, name)
        message = str(refused.value)
        assert "\n" not in message and f"dataset {name!r} is being written by another command (`ingest`" in message
        with pytest.raises(DatasetBusy):
            GraphWriter(neo4j_driver, name).drop()  # nor dropped under it
    finally:
        thread.join(timeout=300)
    assert "error" not in first, first.get("error")
    assert _counts(neo4j_driver, label_for(name)) == _expected(name)  # no relationship written twice
    assert _lease(neo4j_driver, name) is None  # given back
    assert _ingest(neo4j_driver, name).skipped  # and the dataset is whole: a third run has nothing to do
    GraphWriter(neo4j_driver, name).drop()
    assert _lease(neo4j_driver, name) is None and _counts(neo4j_driver, label_for(name)) == (0, 0)


@pytest.mark.parametrize("holder, lapsed, taken", [
    ("{host}:{dead}:abc", False, True),          # a process of this host that is gone: taken at once
    ("elsewhere.example:4242:abc", False, False),  # another host's, still current: refused
    ("elsewhere.example:4242:abc", True, True),    # another host's, lapsed: taken
])
def test_a_lease_left_behind_is_taken_over_only_when_its_holder_is_gone(neo4j_driver, dataset_label, holder,
                                                                       lapsed, taken):
    dead = 2 ** 22 + 12345  # above Linux's default pid_max: no process has it
    owner = holder.format(host=socket.gethostname(), dead=dead)
    neo4j_driver.execute_query(
        "CREATE (:SeederLease {name: $n, owner: $o, command: 'ingest', since: datetime(), "
        "until: datetime() + duration({seconds: $s})})", n=dataset_label, o=owner, s=-5 if lapsed else 600)
    try:
        if taken:
            assert _ingest(neo4j_driver, dataset_label).nodes == NODES
            assert _lease(neo4j_driver, dataset_label) is None
        else:
            with pytest.raises(DatasetBusy, match="pid 4242 on elsewhere.example"):
                _ingest(neo4j_driver, dataset_label)
            assert _counts(neo4j_driver, label_for(dataset_label)) == (0, 0)
    finally:
        neo4j_driver.execute_query("MATCH (l:SeederLease {name: $n}) DELETE l", n=dataset_label)
        GraphWriter(neo4j_driver, dataset_label).drop()


def test_a_writer_whose_lease_was_taken_over_commits_no_further_batch(neo4j_driver, dataset_label):
    name = dataset_label
    outcome: dict = {}

    def run():
        try:
            _ingest(neo4j_driver, name, node_batch=40, relationship_batch=150)
        except DatasetBusy as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while True:
        rows = neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $n}) RETURN m.nodes_done AS d",
                                          n=name).records
        if rows and (rows[0]["d"] or 0) >= 200:
            break
        assert time.monotonic() < deadline and thread.is_alive(), "the ingest did not get going"
        time.sleep(0.01)
    neo4j_driver.execute_query("MATCH (l:SeederLease {name: $n}) SET l.owner = 'elsewhere.example:1:x'", n=name)
    thread.join(timeout=300)
    assert "taken over by another command" in str(outcome.get("error")), outcome
    done = neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $n}) RETURN m.nodes_done AS d",
                                      n=name).records[0]["d"]
    assert _counts(neo4j_driver, label_for(name))[0] == done  # the counter and the nodes agree
    neo4j_driver.execute_query("MATCH (l:SeederLease {name: $n}) DELETE l", n=name)
    GraphWriter(neo4j_driver, name).drop()


def test_an_upsert_does_not_write_under_another_writers_lease(neo4j_driver, dataset_label):
    from seeder_dgl.graphstore.upsert import NodeRow, UpsertError, upsert

    _ingest(neo4j_driver, dataset_label)
    row = NodeRow(id=NODES + 1, name="late node", type="entity", text="late node",
                  embedding=random_embeddings(1, seed=9)[0].tolist())
    neo4j_driver.execute_query(
        "CREATE (:SeederLease {name: $n, owner: 'elsewhere.example:1:x', command: 'drop', since: datetime(), "
        "until: datetime() + duration({seconds: 600})})", n=dataset_label)
    try:
        with pytest.raises(UpsertError, match="being written by another command .`drop`.: nothing was changed"):
            upsert(neo4j_driver, dataset_label, [row], [], lambda texts: random_embeddings(len(texts), seed=3))
        assert _counts(neo4j_driver, label_for(dataset_label))[0] == NODES
    finally:
        neo4j_driver.execute_query("MATCH (l:SeederLease {name: $n}) DELETE l", n=dataset_label)
    upsert(neo4j_driver, dataset_label, [row], [], lambda texts: random_embeddings(len(texts), seed=3))
    assert _counts(neo4j_driver, label_for(dataset_label))[0] == NODES + 1
    GraphWriter(neo4j_driver, dataset_label).drop()


def test_tune_and_a_refit_do_not_write_the_record_under_another_writers_lease(neo4j_driver, dataset_label):
    """``tune`` and ``extract --refit-prior`` write the dataset's record (the chosen settings, the
    fitted linker and prior): while another command holds the dataset's lease they refuse in one
    line, before their minutes of work and again at the write, and the record keeps what it had."""
    from seeder_dgl.graphstore.lease import check_free, write_record

    _ingest(neo4j_driver, dataset_label)

    def record():
        return neo4j_driver.execute_query("MATCH (m:SeederDataset {name: $n}) RETURN m.retrieval AS r, "
                                          "m.entity_linker AS l", n=dataset_label).records[0]

    neo4j_driver.execute_query(
        "CREATE (:SeederLease {name: $n, owner: 'elsewhere.example:1:x', command: 'ingest', since: datetime(), "
        "until: datetime() + duration({seconds: 600})})", n=dataset_label)
    try:
        for command in ("tune", "extract --refit-prior"):
            with pytest.raises(DatasetBusy, match=r"being written by another command \(`ingest`"):
                check_free(neo4j_driver, dataset_label, command)
        with pytest.raises(DatasetBusy):
            write_record(neo4j_driver, dataset_label, "tune", "dataset/set_retrieval", "storing", retrieval="{}")
        with pytest.raises(DatasetBusy):
            write_record(neo4j_driver, dataset_label, "extract --refit-prior", "dataset/set_linking", "storing",
                         linker="{}", prior=None)
        assert record()["r"] is None and record()["l"] is None
    finally:
        neo4j_driver.execute_query("MATCH (l:SeederLease {name: $n}) DELETE l", n=dataset_label)
    write_record(neo4j_driver, dataset_label, "tune", "dataset/set_retrieval", "storing", retrieval='{"seeds": 2}')
    assert record()["r"] == '{"seeds": 2}' and _lease(neo4j_driver, dataset_label) is None  # released after
    GraphWriter(neo4j_driver, dataset_label).drop()


def test_an_ingest_with_nothing_to_do_takes_no_lease(neo4j_driver, dataset_label):
    """The same data ingested again is found complete by reads alone: it answers while another
    command holds the writer lease (a racing upsert is not refused by it); other data is refused."""
    from seeder_dgl.graphstore import lease

    name = dataset_label
    _ingest(neo4j_driver, name)
    held = lease.acquire(neo4j_driver, name, "upsert")
    try:
        again = _ingest(neo4j_driver, name)
        assert again.skipped and (again.nodes, again.relationships) == _expected(name)
        assert _lease(neo4j_driver, name) == held.owner  # untouched
        other = random_kg(name, NODES, EDGES, seed=9)
        with pytest.raises(DatasetBusy):
            GraphWriter(neo4j_driver, name).ingest(other, random_embeddings(NODES, seed=9), random_embeddings(4, seed=8),
                                                   "m", progress=False)
    finally:
        lease.release(neo4j_driver, held)
    # An index dropped by hand is something to do: the ingest takes the lease and builds it again.
    neo4j_driver.execute_query(f"DROP INDEX {label_for(name)}_name")
    assert _ingest(neo4j_driver, name).skipped
    assert neo4j_driver.execute_query("SHOW INDEXES YIELD name WHERE name = $n RETURN name",
                                      n=f"{label_for(name)}_name").records
    GraphWriter(neo4j_driver, name).drop()


def test_any_sequence_of_lease_steps_keeps_one_writer_per_dataset(neo4j_driver, dataset_label):
    """Property (hypothesis, stateful): three writers take, renew and release the leases of two
    datasets in any order, some with leases they held before and lost. At every step Neo4j holds at
    most one lease per dataset, the model's holder's; a second writer is refused in one line; a
    writer renews only a lease it holds; a stale release frees nothing of another's."""
    from hypothesis import HealthCheck, settings, strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

    from seeder_dgl.graphstore import lease

    datasets = (f"{dataset_label}_a", f"{dataset_label}_b")
    writers, pick_dataset = st.integers(0, 2), st.sampled_from(datasets)

    class Leases(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            for name in datasets:  # each example starts from free datasets
                neo4j_driver.execute_query("MATCH (l:SeederLease {name: $n}) DELETE l", n=name)
            self.holder: dict[str, int | None] = dict.fromkeys(datasets)
            self.last: dict[tuple[int, str], lease.Lease] = {}  # each writer's latest lease of a dataset

        @rule(writer=writers, name=pick_dataset)
        def take(self, writer, name):
            if self.holder[name] is None:
                self.last[(writer, name)] = lease.acquire(neo4j_driver, name, f"writer {writer}")
                self.holder[name] = writer
            else:
                with pytest.raises(DatasetBusy) as refused:
                    lease.acquire(neo4j_driver, name, f"writer {writer}")
                assert "\n" not in str(refused.value) and f"writer {self.holder[name]}" in str(refused.value)

        @rule(writer=writers, name=pick_dataset)
        def renew(self, writer, name):
            held = self.last.get((writer, name))
            if held is None:
                return
            if self.holder[name] == writer:
                lease.renew(neo4j_driver, held)
            else:
                with pytest.raises(DatasetBusy):
                    lease.renew(neo4j_driver, held)

        @rule(writer=writers, name=pick_dataset)
        def release(self, writer, name):
            held = self.last.get((writer, name))
            if held is None:
                return
            lease.release(neo4j_driver, held)
            if self.holder[name] == writer:
                self.holder[name] = None

        @invariant()
        def one_writer_the_models(self):
            for name in datasets:
                owners = [r["owner"] for r in neo4j_driver.execute_query(
                    "MATCH (l:SeederLease {name: $n}) RETURN l.owner AS owner", n=name).records]
                writer = self.holder[name]
                assert owners == ([] if writer is None else [self.last[(writer, name)].owner])

    try:
        run_state_machine_as_test(Leases, settings=settings(max_examples=15, stateful_step_count=12, deadline=None,
                                                            derandomize=True, suppress_health_check=list(HealthCheck)))
    finally:
        for name in datasets:
            neo4j_driver.execute_query("MATCH (l:SeederLease {name: $n}) DELETE l", n=name)
