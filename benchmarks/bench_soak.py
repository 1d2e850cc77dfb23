"""Soak: retrieval, live upserts and a second ingest on one Neo4j at the same time, with checks
that nothing went wrong and nothing leaked between the datasets.

    python benchmarks/bench_soak.py [--seconds 60 --clients 8]

Two generated graphs with readable names (people, companies, cities, products) get fresh names,
``soak_a_<hex>`` and ``soak_b_<hex>``. A (about 3,000 nodes) is ingested first with
``seeder-dgl ingest`` (MiniLM embeddings). Then, for ``--seconds``, all at once:

- ``--clients`` threads, each with its own ``Retriever(A, method="khop")``, ask generated
  questions about A's entities (some about people upserted during the run);
- one stream upserts new people (and now and then a new node type and a new relation) into A in
  small batches through ``seeder_dgl.graphstore.upsert``, as ``seeder-dgl upsert`` does;
- a second writer of A, one process after another: the same ``seeder-dgl ingest A`` again, then
  ``seeder-dgl upsert A`` with people of its own (``--no-racer`` leaves it out); each must finish
  or be refused in one line, and its committed people count with the stream's;
- ``seeder-dgl ingest`` writes B (about 10,000 nodes, 66,000 relationships) from its files in a
  child process. B's node texts are put in the embedding cache before the run, so the run holds
  B's loading and Neo4j writes rather than only its encoding (``--b-cold`` encodes them inside).

Checks (any failure: exit code 1): no error in any thread, the upsert stream or the ingest; every
answer consistent (each node is A's node with that id, name and type, never B's; each triple is
a relationship of A between two returned nodes); A's and B's node and relationship counts exact
afterwards (A: initial + committed upserts, B: its graph), read by each dataset's label; A's
original nodes and relationships unchanged (hash before and after); the upserted nodes and
relationships exactly those committed; A's record listing every relation type in A; B equal to
its graph; no relationship between A and B.
Both datasets are dropped at the end (``GraphWriter.drop``, as ``seeder-dgl drop``), also after a
failure or Ctrl-C. Everything seeder-dgl caches (embeddings, manifests) goes to a temporary folder.

Writes benchmarks/results/soak.{json,md} (``--tag NAME``: soak-NAME).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import cpu_probe, machine, percentile, probe_line, write_result  # noqa: E402
from loaders.kg import is_identifier  # noqa: E402

PROTECTED = {"metaqa", "mykg"}
"""Datasets of other people on the shared server: never ingested, changed or dropped here."""
UPSERT_BASE = 1_000_000
RACER_BASE = 2_000_000
"""Ids of the people the second writer's upserts add (the stream's start at UPSERT_BASE)."""
REFUSED = ("being written by another", "another command")
"""What a clean refusal of a second writer says (the dataset's writer lease, or an upsert's check of it)."""
"""Ids of upserted nodes start here, far above the generated ones, so they are told apart by id."""
MESSAGES_KEPT = 5

# ---- the generated graphs ------------------------------------------------------------------
FIRST = ("Ada Boris Chiara Dmitri Elena Farid Greta Hugo Ines Jonas Kaia Lars Mira Nikos Olga Pavel Quinn "
         "Rosa Sami Tove Umar Vera Wiktor Xenia Yusuf Zora Amara Bruno Celine Dario Esme Felix Gemma Hanne Ivo "
         "Jana Kofi Lena Marek Nadia Otto Priya Rafael Sofia Tariq Ulla Viktor Wanda Yara Zeno").split()
LAST = ("Okafor Silva Novak Lindqvist Moreau Haddad Kowalski Brennan Tanaka Oyelaran Petrov Ferreira Nakamura "
        "Olsen Duarte Kaur Schmidt Rossi Ivanova Mendes Achterberg Bakker Castellano Dubois Eriksen Fischer "
        "Galloway Horvath Iyer Jensen Karimi Larsen Mwangi Nielsen Ortega Park Quispe Reyes Sato Torres Uddin "
        "Varga Weber Xu Yilmaz Zielinski Abara Berg Conti Dahl").split()
ADJ = ("Blue Bright Silver Northern Quiet Rapid Golden Green Iron Clear Bold Hidden Swift Red Solid Open True "
       "Little Grand Deep Wild Calm Prime Amber Crimson Polar Sunny Stone Cedar Velvet").split()
NOUN = ("Harbor River Summit Forge Orchard Falcon Meadow Beacon Anchor Lantern Canyon Willow Comet Granite "
        "Pine Delta Bridge Arrow Maple Atlas Tide Ember Crest Haven Fjord Prairie Quarry Reef Spire Vale").split()
KIND = "Robotics Foods Labs Textiles Logistics Energy Media Pharma Motors Software Optics Furniture".split()
CITY_A = "North South East West Port Lake Mount New Old Fort Glen Bay Ash Oak Elm Fair Red Long High Stone".split()
CITY_B = ("haven field ford bridge wick ton mouth brook dale moor well gate stead cliff wood burg mere side "
          "holm worth").split()
ITEM = ("Kettle Drill Lamp Backpack Bicycle Camera Blender Drone Chair Scanner Heater Speaker Tent Watch "
        "Printer Router Stove Mixer Scooter Monitor").split()
RELATIONS = ["works_at", "lives_in", "knows", "headquartered_in", "founded_by", "makes", "sold_in"]
NEW_RELATION = "mentors"
"""A relation A does not have until the upsert stream brings it (the new-relation path)."""
QUESTIONS = {
    "person": ["Where does {} work?", "Which city does {} live in?", "Who does {} know?"],
    "company": ["Who works at {}?", "Where is {} headquartered?", "Who founded {}?", "What does {} make?"],
    "city": ["Which companies are headquartered in {}?", "Who lives in {}?"],
    "product": ["Which company makes {}?", "Where is {} sold?"],
}


class Names:
    """Readable names, each handed out once: A, B and the upserts never share a name, so a name
    says which graph a node came from."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.used = rng, set()

    def _unique(self, make) -> str:
        while True:
            name = make()
            if name not in self.used:
                self.used.add(name)
                return name

    def pick(self, words):
        return words[int(self.rng.integers(len(words)))]

    def person(self) -> str:
        return self._unique(lambda: f"{self.pick(FIRST)} {chr(65 + int(self.rng.integers(26)))}. {self.pick(LAST)}")

    def company(self) -> str:
        return self._unique(lambda: f"{self.pick(ADJ)} {self.pick(NOUN)} {self.pick(KIND)}")

    def city(self) -> str:
        return self._unique(lambda: f"{self.pick(CITY_A)} {self.pick(CITY_B).capitalize()}")

    def product(self) -> str:
        return self._unique(lambda: f"{self.pick(ADJ)} {self.pick(ITEM)} {int(self.rng.integers(100, 1000))}")


@dataclass
class Graph:
    nodes: list[tuple[str, str]] = field(default_factory=list)
    """(name, type); a node's id is its position."""
    edges: list[tuple[int, str, int]] = field(default_factory=list)
    """(source, relation, target), each unordered pair at most once per relation."""

    def add_node(self, name: str, node_type: str) -> int:
        self.nodes.append((name, node_type))
        return len(self.nodes) - 1

    def of_type(self, node_type: str) -> list[int]:
        return [i for i, (_, t) in enumerate(self.nodes) if t == node_type]


def generate(names: Names, people: int, knows: int) -> Graph:
    """A small world: people work at companies, live in cities and know each other; companies are
    headquartered in cities, founded by people and make products sold in cities."""
    rng = names.rng
    g = Graph()
    persons = [g.add_node(names.person(), "person") for _ in range(people)]
    companies = [g.add_node(names.company(), "company") for _ in range(max(2, people // 10))]
    cities = [g.add_node(names.city(), "city") for _ in range(max(2, people // 40))]
    products = [g.add_node(names.product(), "product") for _ in range(max(2, people // 5))]
    seen: set[tuple[str, int, int]] = set()

    def edge(a: int, relation: str, b: int) -> None:
        key = (relation, min(a, b), max(a, b))
        if a != b and key not in seen:  # the writer keeps one relationship per pair and relation
            seen.add(key)
            g.edges.append((a, relation, b))

    def any_of(ids: list[int]) -> int:
        return ids[int(rng.integers(len(ids)))]

    for p in persons:
        edge(p, "works_at", any_of(companies))
        edge(p, "lives_in", any_of(cities))
        for _ in range(knows):
            edge(p, "knows", any_of(persons))
    for c in companies:
        edge(c, "headquartered_in", any_of(cities))
        edge(c, "founded_by", any_of(persons))
    for i, product in enumerate(products):
        edge(companies[i % len(companies)], "makes", product)
        for _ in range(2):
            edge(product, "sold_in", any_of(cities))
    return g


def write_tables(g: Graph, folder: Path) -> Path:
    """nodes.csv and edges.csv, the tables `seeder-dgl ingest --source` reads; ids in file order,
    so each node's id in Neo4j is its position here."""
    folder.mkdir(parents=True)
    with open(folder / "nodes.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["id", "name", "type"])
        out.writerows((i, name, node_type) for i, (name, node_type) in enumerate(g.nodes))
    with open(folder / "edges.csv", "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["source", "relation", "target"])
        out.writerows(g.edges)
    return folder


# ---- reading what Neo4j holds ------------------------------------------------------------------
def record(driver, name: str) -> dict | None:
    rows = driver.execute_query("MATCH (m:SeederDataset {name: $name}) RETURN m {.*} AS m", name=name).records
    return dict(rows[0]["m"]) if rows else None


def checked(label: str) -> str:
    """A label from a dataset record, checked before it is put into a statement (as the project does)."""
    if not isinstance(label, str) or not is_identifier(label) or label.endswith("\n"):
        raise RuntimeError(f"{label!r} is not a label that can go into Cypher")
    return f"`{label}`"


def counts(driver, label: str) -> tuple[int, int]:
    """Nodes with the label and relationships between two of them (as upsert counts them)."""
    q = checked(label)
    nodes = driver.execute_query(f"MATCH (n:{q}) RETURN count(n) AS c").records[0]["c"]
    rels = driver.execute_query(f"MATCH (:{q})-[r]->(:{q}) RETURN count(r) AS c").records[0]["c"]
    return int(nodes), int(rels)


USER_ID = "toInteger(coalesce(n.key, toString(n.id)))"
"""A node's id as the soak's files and upserts give it (the node table's id, which upserts name)."""


def user_id(node: dict) -> int:
    """The id the soak gave a retrieved node (``RetrievedNode.key``), as its files and upserts name it."""
    return int(node["key"]) if node.get("key") is not None else int(node["id"])


def read_graph(driver, label: str, embeddings: bool = True) -> tuple[dict, set]:
    """user id -> (name, type, sorted labels[, sha1 of the embedding]) and the set of undirected
    relationships (relation, low id, high id) of one dataset."""
    q = checked(label)
    nodes = {}
    for r in driver.execute_query(f"MATCH (n:{q}) RETURN {USER_ID} AS id, n.name AS name, n.type AS type, labels(n) AS "
                                  "labels" + (", n.embedding AS embedding" if embeddings else "")).records:
        emb = (hashlib.sha1(np.asarray(r["embedding"] or [], dtype=np.float32).tobytes()).hexdigest(),) if embeddings else ()
        nodes[int(r["id"])] = (r["name"], r["type"], tuple(sorted(r["labels"])), *emb)
    edges = set()
    for r in driver.execute_query(f"MATCH (a:{q})-[r]->(b:{q}) RETURN {USER_ID.replace('n.', 'a.')} AS a, type(r) AS t, "
                                  f"{USER_ID.replace('n.', 'b.')} AS b").records:
        a, b = int(r["a"]), int(r["b"])
        edges.add((r["t"].lower(), min(a, b), max(a, b)))
    return nodes, edges


def digest(nodes: dict, edges: set) -> str:
    h = hashlib.sha1()
    for i in sorted(nodes):
        h.update(repr((i, nodes[i])).encode())
    for e in sorted(edges):
        h.update(repr(e).encode())
    return h.hexdigest()


def originals(nodes: dict, edges: set) -> tuple[dict, set]:
    """A's generated part: nodes below UPSERT_BASE and the relationships among them."""
    return ({i: v for i, v in nodes.items() if i < UPSERT_BASE},
            {e for e in edges if e[1] < UPSERT_BASE and e[2] < UPSERT_BASE})


def as_generated(g: Graph) -> tuple[dict, set]:
    """What a graph's nodes (id -> name, type) and undirected relationships should be in Neo4j."""
    return ({i: v for i, v in enumerate(g.nodes)},
            {(r, min(a, b), max(a, b)) for a, r, b in g.edges})


# ---- the ingest, as `seeder-dgl ingest` ---------------------------------------------------------
def start_ingest(name: str, folder: Path, log: Path, env: dict) -> subprocess.Popen:
    """`seeder-dgl ingest NAME --source FOLDER` in a child process: the command itself, and a
    process that can be stopped before its dataset is dropped."""
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "seeder_dgl.cli", "ingest", name, "--source", str(folder)],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def log_tail(log: Path, lines: int = 5) -> str:
    try:
        return " | ".join(line.strip() for line in log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_process(proc: subprocess.Popen | None) -> None:
    """Interrupt an ingest still running (as Ctrl-C does) and wait: a dataset is dropped only
    after nothing writes to it any more."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---- the threads --------------------------------------------------------------------------------
class Tally:
    """Counts and the first messages of one kind of failure, shared by threads."""

    def __init__(self):
        self.count, self.first, self.lock = 0, [], threading.Lock()

    def add(self, message: str) -> None:
        with self.lock:
            self.count += 1
            if len(self.first) < MESSAGES_KEPT:
                self.first.append(message[:400])


@dataclass
class Live:
    """What the upsert stream has sent (before it commits: a query may see a node the moment the
    transaction commits, before the stream hears back) and what it committed."""
    sent_nodes: dict = field(default_factory=dict)          # id -> (name, type)
    sent_edges: set = field(default_factory=set)            # (relation, low, high)
    committed_nodes: dict = field(default_factory=dict)
    committed_edges: set = field(default_factory=set)
    batches: int = 0
    seconds: list = field(default_factory=list)
    encode_seconds: list = field(default_factory=list)
    timeline: list = field(default_factory=list)            # (start in the run, seconds, committed) per batch
    t0: float = 0.0
    new_person_ids: list = field(default_factory=list)      # committed people, for questions about them
    refused: int = 0                                        # batches refused while the second writer held A


def upsert_stream(driver, dataset: str, encoder, names: Names, a: Graph, live: Live, initial: tuple[int, int],
                  args, stop: threading.Event, errors: Tally) -> None:
    """Small batches of new people (every tenth batch also a startup, a new node type, and the new
    relation), committed one after the other until ``stop``; each commit's counts are checked."""
    from seeder_dgl.graphstore import upsert as live_update

    rng = np.random.default_rng(args.seed + 1)
    companies, cities, persons = a.of_type("company"), a.of_type("city"), a.of_type("person")
    next_id = UPSERT_BASE

    def pick(ids):
        return int(ids[int(rng.integers(len(ids)))])

    def encode(texts):  # as `seeder-dgl upsert` encodes, timed
        t = time.perf_counter()
        vectors = encoder.encode(texts, show_progress=False)
        live.encode_seconds.append(time.perf_counter() - t)
        return vectors

    while not stop.is_set():
        node_rows, edge_rows = [], []
        known = persons + live.new_person_ids  # committed people only: an edge must not point at nothing
        for _ in range(args.upsert_batch):
            pid, next_id = next_id, next_id + 1
            node_rows.append({"id": pid, "name": names.person(), "type": "person"})
            edge_rows += [{"source": pid, "relation": "works_at", "target": pick(companies)},
                          {"source": pid, "relation": "lives_in", "target": pick(cities)},
                          {"source": pid, "relation": "knows", "target": pick(known)}]
        if live.batches % 10 == 0:
            sid, next_id = next_id, next_id + 1
            node_rows.append({"id": sid, "name": names.company(), "type": "startup"})
            edge_rows += [{"source": sid, "relation": "founded_by", "target": node_rows[0]["id"]},
                          {"source": sid, "relation": "headquartered_in", "target": pick(cities)},
                          {"source": node_rows[0]["id"], "relation": NEW_RELATION, "target": pick(persons)}]
        nodes = live_update.parse_nodes(node_rows)
        edges = live_update.parse_edges(edge_rows)
        batch_nodes = {n.id: (n.name, n.type) for n in nodes}
        batch_edges = {(e.relation, min(e.source, e.target), max(e.source, e.target)) for e in edges}
        live.sent_nodes.update(batch_nodes)
        live.sent_edges.update(batch_edges)
        t, ok = time.perf_counter(), False
        try:
            result = live_update.upsert(driver, dataset, nodes, edges, encode=encode)
        except Exception as exc:  # counted, not raised: the report lists them
            if any(r in str(exc) for r in REFUSED):  # the second writer held A: a clean refusal, nothing written
                live.refused += 1
            else:
                errors.add(f"upsert batch {live.batches}: {type(exc).__name__}: {exc}")
        else:
            ok = True
            live.seconds.append(time.perf_counter() - t)
            live.committed_nodes.update(batch_nodes)
            live.committed_edges.update(batch_edges)
            live.new_person_ids.extend(i for i, (_, kind) in batch_nodes.items() if kind == "person")
            want = (initial[0] + len(live.committed_nodes), initial[1] + len(live.committed_edges))
            # With a second writer, its commits interleave: only the counts after the run are exact.
            if not args.racer and (result["nodes"], result["relationships"]) != want:
                errors.add(f"upsert batch {live.batches}: the dataset has {result['nodes']} nodes and "
                           f"{result['relationships']} relationships after it, expected {want[0]} and {want[1]}")
        live.timeline.append((round(t - live.t0, 2), round(time.perf_counter() - t, 3), ok))
        live.batches += 1
        stop.wait(args.upsert_pause)


def race_writer(name: str, folder: Path, scratch: Path, a: Graph, names: Names, live: Live, env: dict,
                stop: threading.Event, errors: Tally, outcomes: dict) -> None:
    """A second writer of A, each in a process of its own, one after the other until ``stop``: the
    same ``seeder-dgl ingest A`` again, then ``seeder-dgl upsert A`` with people of its own. Each
    must finish (ingest: nothing to do; upsert: committed, counted with the stream's) or be refused
    in one line; anything else is an error."""
    rng = np.random.default_rng(7)
    persons = a.of_type("person")
    round_no = 0
    while not stop.is_set():
        kind = ("ingest", "upsert")[round_no % 2]
        log = scratch / f"racer-{round_no}.log"
        args = [sys.executable, "-m", "seeder_dgl.cli", "ingest", name, "--source", str(folder)]
        batch_nodes, batch_edges = {}, set()
        if kind == "upsert":
            nodes_file, edges_file = scratch / f"racer-{round_no}-nodes.jsonl", scratch / f"racer-{round_no}-edges.jsonl"
            node_rows, edge_rows = [], []
            for j in range(3):
                pid = RACER_BASE + 3 * round_no + j
                node_rows.append({"id": pid, "name": names.person(), "type": "person"})
                target = int(persons[int(rng.integers(len(persons)))])
                edge_rows.append({"source": pid, "relation": "knows", "target": target})
                batch_nodes[pid] = (node_rows[-1]["name"], "person")
                batch_edges.add(("knows", min(pid, target), max(pid, target)))
            nodes_file.write_text("".join(json.dumps(r) + "\n" for r in node_rows))
            edges_file.write_text("".join(json.dumps(r) + "\n" for r in edge_rows))
            args = [sys.executable, "-m", "seeder_dgl.cli", "upsert", name, "--nodes", str(nodes_file),
                    "--edges", str(edges_file)]
            live.sent_nodes.update(batch_nodes)  # a query may see them the moment they commit
            live.sent_edges.update(batch_edges)
        with open(log, "w") as out:
            code = subprocess.run(args, cwd=ROOT, env={**env, "COLUMNS": "400"}, stdout=out,
                                  stderr=subprocess.STDOUT).returncode
        text = log.read_text(errors="replace")
        if code == 0 and kind == "upsert":
            live.committed_nodes.update(batch_nodes)
            live.committed_edges.update(batch_edges)
            outcome = "upsert committed"
        elif code == 0 and "nothing to do" in text:
            outcome = "ingest again: nothing to do"
        elif code == 1 and any(r in text for r in REFUSED) and "Traceback" not in text:
            outcome = f"{kind} refused in one line"
        else:
            outcome = f"{kind}: error"
            errors.add(f"second writer, {kind}: exit {code}: {log_tail(log)}")
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        round_no += 1
        stop.wait(0.5)


@dataclass
class Client:
    latencies: list = field(default_factory=list)           # retrieve(), question embedding included
    graph_seconds: list = field(default_factory=list)       # Retrieval.seconds: seeding, K-hop, ranking
    answered: int = 0
    errors: int = 0
    inconsistent: int = 0
    about_new: int = 0
    found_new: int = 0


def check_answer(result, a_nodes: dict, a_edges: set, b_nodes: dict, live: Live, relations: set) -> list[str]:
    """Why an answer is inconsistent with A (empty when it is fine)."""
    problems = []
    out = result.to_dict()
    ids = [user_id(n) for n in out["nodes"]]
    if len(set(ids)) != len(ids):
        problems.append(f"repeated node ids in {ids}")
    by_name = {}
    for n, i in zip(out["nodes"], ids):
        got = (n["name"], n["type"])
        want = a_nodes.get(i) if i < UPSERT_BASE else live.sent_nodes.get(i)
        if want != got:
            leak = " (B's node with that id)" if b_nodes.get(i) == got else ""
            problems.append(f"node {i} {got} is not A's {want}{leak}")
        by_name[n["name"]] = i
    for t in out["triples"]:
        head, relation, tail = by_name.get(t["head"]), t["relation"], by_name.get(t["tail"])
        if head is None or tail is None:
            problems.append(f"triple {t} does not connect two returned nodes")
            continue
        key = (relation, min(head, tail), max(head, tail))
        if relation not in relations or (key not in a_edges and key not in live.sent_edges):
            problems.append(f"triple {t} is not a relationship of A")
    return problems


def query_client(retriever, client: Client, questions, a_nodes, a_edges, b_nodes, live: Live, relations,
                 args, seed: int, start: threading.Barrier, stop: threading.Event,
                 errors: Tally, inconsistent: Tally) -> None:
    rng = np.random.default_rng(seed)
    try:
        start.wait()
    except threading.BrokenBarrierError:  # the run never started
        return
    while not stop.is_set():
        new = live.new_person_ids
        about_new = bool(new) and rng.random() < args.new_share
        if about_new:  # a person upserted during the run: the next query must be able to find them
            pid = new[int(rng.integers(len(new)))]
            question, target = QUESTIONS["person"][int(rng.integers(3))].format(live.committed_nodes[pid][0]), pid
        else:
            question, target = questions[int(rng.integers(len(questions)))], None
        t = time.perf_counter()
        try:
            result = retriever.retrieve(question, k=args.k)
        except Exception as exc:  # counted, not raised: the report lists them
            client.errors += 1
            errors.add(f"{threading.current_thread().name}: {question!r}: {type(exc).__name__}: {exc}")
            continue
        client.latencies.append(time.perf_counter() - t)
        client.graph_seconds.append(result.seconds)
        client.answered += 1
        problems = check_answer(result, a_nodes, a_edges, b_nodes, live, relations)
        if problems:
            client.inconsistent += 1
            inconsistent.add(f"{question!r}: " + "; ".join(problems[:3]))
        if target is not None:
            client.about_new += 1
            client.found_new += any(user_id(vars(n)) == target for n in result.nodes)


# ---- the run ------------------------------------------------------------------------------------
class Soak:
    """One soak run. It holds every dataset, process and thread it starts, so that ``close`` can
    stop and drop whatever exists at whatever point the run ended."""

    def __init__(self, args):
        from seeder_dgl.graphstore.connection import open_driver

        self.args = args
        run_id = secrets.token_hex(4)
        self.name_a, self.name_b = f"soak_a_{run_id}", f"soak_b_{run_id}"
        assert not {self.name_a, self.name_b} & PROTECTED
        self.driver = open_driver()
        # seeder-dgl's caches (embeddings, manifests) in a folder of this run only: the shared
        # cache gets no soak texts, and every run encodes A from scratch.
        self.scratch = Path(tempfile.mkdtemp(prefix="seeder-soak-"))
        os.environ.update({"SEEDER_CACHE": str(self.scratch / "cache"),
                           "SEEDER_EMBEDDINGS": str(self.scratch / "cache" / "embeddings"),
                           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DGLBACKEND": "pytorch"})
        self.procs: dict[str, subprocess.Popen] = {}
        self.threads: list[threading.Thread] = []
        self.retrievers: list = []
        self.stop = threading.Event()
        self.start: threading.Barrier | None = None
        self.live = Live()
        self.clients = [Client() for _ in range(args.clients)]
        self.errors = {"queries": Tally(), "upserts": Tally(), "ingest": Tally(), "second writer": Tally()}
        self.racer_outcomes: dict[str, int] = {}
        self.inconsistent = Tally()
        self.probe_before = cpu_probe()

    # ---- before the run
    def generate(self) -> None:
        args = self.args
        self.names = Names(np.random.default_rng(args.seed))
        self.a = generate(self.names, args.a_people, knows=2)
        self.b = generate(self.names, args.b_people, knows=args.b_knows)
        print(f"A = {self.name_a}: {len(self.a.nodes):,} nodes, {len(self.a.edges):,} relationships; "
              f"B = {self.name_b}: {len(self.b.nodes):,} nodes, {len(self.b.edges):,} relationships", flush=True)

    def ingest(self, which: str, name: str, g: Graph) -> subprocess.Popen:
        folder = write_tables(g, self.scratch / which)
        self.procs[which] = start_ingest(name, folder, self.scratch / f"ingest-{which}.log", dict(os.environ))
        return self.procs[which]

    def ingest_a(self) -> None:
        """A, whole, before anything else; then what it holds, to compare with at the end."""
        t0 = time.perf_counter()
        if self.ingest("a", self.name_a, self.a).wait() != 0:
            raise RuntimeError(f"the ingest of A failed: {log_tail(self.scratch / 'ingest-a.log')}")
        self.ingest_a_seconds = time.perf_counter() - t0
        self.label_a = record(self.driver, self.name_a)["label"]
        self.initial = counts(self.driver, self.label_a)
        nodes, self.a_edges = read_graph(self.driver, self.label_a)
        self.a_nodes = {i: v[:2] for i, v in nodes.items()}
        if (self.a_nodes, self.a_edges) != as_generated(self.a):
            raise RuntimeError("A in Neo4j differs from its generated graph right after its ingest")
        self.before = digest(nodes, self.a_edges)
        print(f"A ingested in {self.ingest_a_seconds:.1f} s: {self.initial[0]:,} nodes, "
              f"{self.initial[1]:,} relationships", flush=True)

    def prepare(self) -> None:
        """The upsert encoder (also filling the cache with B's texts) and one warm Retriever per client."""
        from seeder_dgl.api import Retriever
        from seeder_dgl.datasets import resolve_model
        from seeder_dgl.embeddings import TextEncoder
        from seeder_dgl.graphstore.live import LiveGraph

        # The encoder `seeder-dgl upsert` uses for A.
        self.encoder = TextEncoder(resolve_model(LiveGraph(self.driver, self.name_a).info.model))
        t0 = time.perf_counter()
        self.encoder.encode(["warm-up"], show_progress=False)
        if not self.args.b_cold:
            self.encoder.encode([n for n, _ in self.b.nodes], show_progress=False)
            self.encoder.encode_relations(RELATIONS)
        print(f"encoder ready{'' if self.args.b_cold else ', B cached'} in {time.perf_counter() - t0:.1f} s", flush=True)
        # Each Retriever loads its own encoder (nothing is passed in), as Retriever(A) does.
        self.questions = [template.format(n) for n, t in self.a.nodes for template in QUESTIONS[t]]
        t0 = time.perf_counter()
        for _ in range(self.args.clients):
            self.retrievers.append(Retriever(self.name_a, method="khop"))
            self.retrievers[-1].retrieve(self.questions[0], k=self.args.k)
        print(f"{self.args.clients} retrievers ready in {time.perf_counter() - t0:.1f} s", flush=True)

    # ---- the run
    def run(self) -> None:
        """Queries, upserts and B's ingest together for ``--seconds``; then B's ingest to its end."""
        args, live = self.args, self.live
        b_nodes = {i: v for i, v in enumerate(self.b.nodes)}
        relations = set(RELATIONS) | {NEW_RELATION}
        self.start = threading.Barrier(args.clients + 1)
        for c, (retriever, client) in enumerate(zip(self.retrievers, self.clients)):
            self.threads.append(threading.Thread(
                target=query_client, name=f"client-{c}", daemon=True,
                args=(retriever, client, self.questions, self.a_nodes, self.a_edges, b_nodes, live, relations,
                      args, args.seed + 100 + c, self.start, self.stop, self.errors["queries"], self.inconsistent)))
            self.threads[-1].start()
        writer = threading.Thread(target=upsert_stream, name="upserts", daemon=True,
                                  args=(self.driver, self.name_a, self.encoder, self.names, self.a, live,
                                        self.initial, args, self.stop, self.errors["upserts"]))
        self.threads.append(writer)
        racer = threading.Thread(target=race_writer, name="second-writer", daemon=True,
                                 args=(self.name_a, self.scratch / "a", self.scratch, self.a, self.names, live,
                                       dict(os.environ), self.stop, self.errors["second writer"],
                                       self.racer_outcomes))
        if args.racer:
            self.threads.append(racer)

        print(f"running {args.clients} clients, the upsert stream and B's ingest for {args.seconds:g} s", flush=True)
        self.start.wait()
        t0 = live.t0 = time.perf_counter()
        proc_b = self.ingest("b", self.name_b, self.b)
        writer.start()
        if args.racer:
            racer.start()
        self.b_end = None
        while time.perf_counter() - t0 < args.seconds:
            time.sleep(0.2)
            if self.b_end is None and proc_b.poll() is not None:
                self.b_end = time.perf_counter() - t0
        self.stop.set()
        self.window = time.perf_counter() - t0
        for th in self.threads:
            th.join()
        if self.b_end is None:
            print("the run is over; waiting for B's ingest to finish", flush=True)
            proc_b.wait()
            self.b_end = time.perf_counter() - t0
        if proc_b.returncode != 0:
            self.errors["ingest"].add(f"the ingest of B exited {proc_b.returncode}: "
                                      f"{log_tail(self.scratch / 'ingest-b.log')}")
        summary = self.scratch / "cache" / self.name_b / "ingest.json"  # written by the ingest command
        self.ingest_b = json.loads(summary.read_text()) if summary.is_file() else {}

    # ---- after the run
    def check(self) -> dict[str, tuple[bool, str]]:
        """Each check: (passed, what was found)."""
        driver, live, b = self.driver, self.live, self.b
        rec_a, rec_b = record(driver, self.name_a), record(driver, self.name_b) or {}
        label_b = rec_b.get("label")
        count_a = counts(driver, self.label_a)
        count_b = counts(driver, label_b) if label_b else (0, 0)
        nodes, edges = read_graph(driver, self.label_a)
        kept = originals(nodes, edges)
        new_nodes = {i: v[:2] for i, v in nodes.items() if i >= UPSERT_BASE}
        new_edges = edges - kept[1]
        b_nodes, b_edges = read_graph(driver, label_b, embeddings=False) if label_b else ({}, set())
        crossing = driver.execute_query(f"MATCH (:{checked(self.label_a)})-[r]-(:{checked(label_b)}) "
                                        "RETURN count(r) AS c").records[0]["c"] if label_b else 0
        types_a = driver.execute_query(f"MATCH (:{checked(self.label_a)})-[r]->() RETURN collect(DISTINCT type(r)) "
                                       "AS types").records[0]["types"]
        unknown_types = sorted(set(types_a) - set(rec_a["relation_types"]))
        want_a = (self.initial[0] + len(live.committed_nodes), self.initial[1] + len(live.committed_edges))
        record_a = (rec_a["num_nodes"], rec_a["num_relationships"])
        record_b = (rec_b.get("num_nodes"), rec_b.get("num_relationships"))
        after = digest(*kept)
        errors = self.errors
        return {
            "no query errors": (errors["queries"].count == 0, f"{errors['queries'].count} errors"),
            "no upsert errors": (errors["upserts"].count == 0, f"{errors['upserts'].count} errors"),
            "a second writer of A finished or was refused in one line": (
                errors["second writer"].count == 0 and (not self.args.racer or bool(self.racer_outcomes)),
                ", ".join(f"{k}: {v}" for k, v in sorted(self.racer_outcomes.items())) or "not run"),
            "B ingested without error": (errors["ingest"].count == 0 and rec_b.get("status") == "complete",
                                         f"exit {self.procs['b'].returncode}, record {rec_b.get('status')}"),
            "every client answered": (all(c.answered for c in self.clients),
                                      f"{', '.join(str(c.answered) for c in self.clients)} questions"),
            "every answer consistent": (self.inconsistent.count == 0,
                                        f"{self.inconsistent.count} inconsistent answers"),
            "A's counts exact": (count_a == want_a == record_a,
                                 f"{count_a[0]:,} nodes, {count_a[1]:,} relationships by label (record "
                                 f"{record_a[0]:,} / {record_a[1]:,}); expected initial {self.initial[0]:,} / "
                                 f"{self.initial[1]:,} + committed {len(live.committed_nodes):,} / "
                                 f"{len(live.committed_edges):,}"),
            "B's counts exact": (count_b == (len(b.nodes), len(b.edges)) == record_b,
                                 f"{count_b[0]:,} nodes, {count_b[1]:,} relationships by label (record "
                                 f"{' / '.join(f'{x:,}' if x is not None else '-' for x in record_b)}); its graph "
                                 f"{len(b.nodes):,} / {len(b.edges):,}"),
            "A's original nodes and relationships unchanged": (after == self.before, f"sha1 {self.before[:12]} "
                                                               f"before, {after[:12]} after"),
            "A's upserted part exactly what was committed": (
                new_nodes == live.committed_nodes and new_edges == live.committed_edges,
                f"{len(new_nodes):,} nodes, {len(new_edges):,} relationships found; "
                f"{len(live.committed_nodes):,} / {len(live.committed_edges):,} committed"),
            "B equals its graph": (({i: v[:2] for i, v in b_nodes.items()}, b_edges) == as_generated(b),
                                   f"{len(b_nodes):,} nodes, {len(b_edges):,} relationships read back"),
            "no relationship between A and B": (crossing == 0, f"{crossing} found"),
            # Upserts extend the record's relation vocabulary (sim(q, r) in K-hop reads it).
            "A's record lists every relation type in A": (not unknown_types, f"{len(types_a)} types in A; "
                                                          f"missing from the record: {', '.join(unknown_types) or 'none'}"),
        }

    def report(self, checks: dict[str, tuple[bool, str]]) -> int:
        """Print and write soak.{json,md}; 0 when every check passed."""
        args, live, a, b, ib = self.args, self.live, self.a, self.b, self.ingest_b
        probe_after = cpu_probe()
        latencies = [x * 1000 for c in self.clients for x in c.latencies]
        graph_ms = [x * 1000 for c in self.clients for x in c.graph_seconds]
        upsert_ms = [x * 1000 for x in live.seconds]
        answered = sum(c.answered for c in self.clients)
        about_new, found_new = sum(c.about_new for c in self.clients), sum(c.found_new for c in self.clients)
        write_s = ib.get("write_seconds")
        writes_from = self.b_end - write_s if write_s else None
        failed = [k for k, (ok, _) in checks.items() if not ok]
        result = {
            "cpu_probe_ms": {"before": self.probe_before, "after": probe_after}, "machine": machine(),
            "settings": vars(args),
            "datasets": {"a": {"name": self.name_a, "nodes": len(a.nodes), "relationships": len(a.edges),
                               "ingest_seconds": round(self.ingest_a_seconds, 1)},
                         "b": {"name": self.name_b, "nodes": len(b.nodes), "relationships": len(b.edges),
                               "embeddings_cached_before": not args.b_cold}},
            "seconds": round(self.window, 1),
            "queries": {"answered": answered, "per_client": [c.answered for c in self.clients],
                        "errors_per_client": [c.errors for c in self.clients],
                        "inconsistent_per_client": [c.inconsistent for c in self.clients],
                        "queries_per_second": answered / self.window,
                        "p50_ms": percentile(latencies, 50), "p95_ms": percentile(latencies, 95),
                        "graph_p50_ms": percentile(graph_ms, 50), "graph_p95_ms": percentile(graph_ms, 95),
                        "about_upserted_people": about_new, "upserted_person_returned": found_new},
            "upserts": {"batches_committed": len(live.seconds), "batches_failed": live.batches - len(live.seconds),
                        "batches_refused": live.refused,
                        "nodes_committed": len(live.committed_nodes),
                        "relationships_committed": len(live.committed_edges),
                        "p50_ms": percentile(upsert_ms, 50), "p95_ms": percentile(upsert_ms, 95),
                        "encode_p50_ms": percentile([x * 1000 for x in live.encode_seconds], 50),
                        "timeline": live.timeline},
            "ingest_b": {"finished_at_s": round(self.b_end, 1),
                         "neo4j_writes_from_s": round(writes_from, 1) if writes_from is not None else None, **ib},
            "second_writer": self.racer_outcomes,
            "errors": {k: {"count": t.count, "first": t.first} for k, t in self.errors.items()},
            "inconsistent_answers": {"count": self.inconsistent.count, "first": self.inconsistent.first},
            "checks": {k: {"ok": ok, "detail": detail} for k, (ok, detail) in checks.items()},
            "passed": not failed,
        }
        q, u, m = result["queries"], result["upserts"], result["machine"]
        b_row = f"{self.b_end:.1f} s after the run started"
        if write_s:
            b_row += (f": load {ib['load_seconds']:.1f} s, encode {ib['encode_seconds']:.1f} s, Neo4j {write_s:.1f} s "
                      f"(nodes {ib['node_seconds']:.1f}, relationships {ib['relationship_seconds']:.1f}, indexes "
                      f"{ib['index_seconds']:.1f}); its Neo4j writes ran from about {writes_from:.0f} s to "
                      f"{self.b_end:.0f} s of the {self.window:.0f} s run")
        md = "\n".join([
            f"# Soak: {args.clients} query clients, live upserts and a second ingest for {self.window:.0f} s", "",
            f"Machine: {m['cpu']}, {m['cores']} cores, shared with other jobs. Command: `python "
            f"benchmarks/bench_soak.py --seconds {args.seconds:g} --clients {args.clients}`.", "",
            f"A: {len(a.nodes):,} nodes, {len(a.edges):,} relationships, ingested first "
            f"({self.ingest_a_seconds:.1f} s, MiniLM encoding included). B: {len(b.nodes):,} nodes, "
            f"{len(b.edges):,} relationships, ingested during the run by `seeder-dgl ingest` in a child process"
            + ("" if args.b_cold else " (its node texts were in the embedding cache)") + ". Each client has its "
            f"own `Retriever(A, method=\"khop\")` (dense seeds k0 = 3, budgets 50/97) and asks for k = {args.k}.", "",
            "| | |", "|---|---|",
            f"| questions answered | {answered:,}, {q['queries_per_second']:.1f}/s (per client "
            f"{', '.join(str(c.answered) for c in self.clients)}) |",
            f"| latency of `retrieve()`, question embedding included | p50 {q['p50_ms']:.0f} ms, "
            f"p95 {q['p95_ms']:.0f} ms |",
            f"| of which seeding, K-hop and reading nodes and triples (`Retrieval.seconds`) | p50 "
            f"{q['graph_p50_ms']:.0f} ms, p95 {q['graph_p95_ms']:.0f} ms |",
            f"| upserts committed | {u['batches_committed']:,} batches: {u['nodes_committed']:,} nodes, "
            f"{u['relationships_committed']:,} relationships; p50 {u['p50_ms']:.0f} ms, p95 {u['p95_ms']:.0f} ms "
            f"a batch (encoding p50 {u['encode_p50_ms']:.0f} ms); {u['batches_failed']} not committed, "
            f"{live.refused} of them refused in one line while the second writer held A |",
            f"| questions about people upserted during the run | {about_new:,}; the person was among the "
            f"returned nodes in {found_new:,} |",
            f"| ingest of B | {b_row} |",
            f"| second writer of A (`ingest` again, `upsert` in processes of its own) | "
            f"{', '.join(f'{k}: {v}' for k, v in sorted(self.racer_outcomes.items())) or 'not run'} |", "",
            "| check | result | found |", "|---|---|---|",
            *[f"| {k} | {'pass' if ok else '**FAIL**'} | {detail} |" for k, (ok, detail) in checks.items()], "",
            *([f"First errors: {'; '.join(x for t in self.errors.values() for x in t.first)}", "",
               f"First inconsistent answers: {'; '.join(self.inconsistent.first)}", ""] if failed else []),
            probe_line(self.probe_before, probe_after),
        ])
        print(md)
        write_result("soak" + (f"-{args.tag}" if args.tag else ""), result, md)
        if failed:
            print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1 if failed else 0

    def close(self) -> int:
        """Stop everything that writes, then drop both datasets. Returns 1 when one could not be dropped."""
        # Nothing may write to a dataset while it is dropped: the ingests and the threads stop first.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.stop.set()
        if self.start is not None:
            self.start.abort()  # clients still waiting for a run that never started
        for proc in self.procs.values():
            stop_process(proc)
        for th in self.threads:
            if th.is_alive():  # a query or an upsert transaction finishing
                th.join(timeout=120)
        for retriever in self.retrievers:
            retriever.close()
        status = drop(self.driver, (self.name_a, self.name_b))
        self.driver.close()
        shutil.rmtree(self.scratch, ignore_errors=True)
        return status


def drop(driver, datasets) -> int:
    """`seeder-dgl drop` for each dataset (also one that never got its record), then a check that
    no node of it is left. Returns 0, or 1 when something stayed."""
    from seeder_dgl.graphstore.writer import GraphWriter, dataset_label

    status = 0
    for name in datasets:
        assert name not in PROTECTED
        try:
            label = (record(driver, name) or {}).get("label") or dataset_label(name)
            deleted = GraphWriter(driver, name).drop()
            left = counts(driver, label)[0]
            gone = record(driver, name) is None and left == 0
            print(f"dropped {name}: {deleted:,} nodes deleted" + ("" if gone else f", {left:,} nodes LEFT"), flush=True)
            status |= not gone
        except Exception as exc:
            print(f"could not drop {name}: {type(exc).__name__}: {exc}; run `seeder-dgl drop {name} --yes`",
                  file=sys.stderr)
            status = 1
    return int(status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the concurrent run")
    parser.add_argument("--clients", type=int, default=8, help="query threads, each with its own Retriever")
    parser.add_argument("--a-people", type=int, default=2200, help="people in A (A has about 1.33 nodes a person)")
    parser.add_argument("--b-people", type=int, default=7500, help="people in B")
    parser.add_argument("--b-knows", type=int, default=6, help="'knows' relationships per person in B (A: 2)")
    parser.add_argument("--b-cold", action="store_true",
                        help="leave B's embeddings to its ingest (inside the run) instead of caching them first")
    parser.add_argument("--upsert-batch", type=int, default=5, help="new people per upsert")
    parser.add_argument("--upsert-pause", type=float, default=0.1, help="seconds between two upserts")
    parser.add_argument("--k", type=int, default=20, help="nodes per answer")
    parser.add_argument("--new-share", type=float, default=0.2,
                        help="share of questions about people upserted during the run")
    parser.add_argument("--no-racer", dest="racer", action="store_false",
                        help="leave out the second writer of A (the same ingest again, upserts in other processes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tag", default=None, help="suffix of the results file, to keep several runs")
    args = parser.parse_args()

    # Ctrl-C and SIGTERM both unwind through Soak.close, which drops the datasets.
    def interrupted(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupted)

    from seeder_dgl.errors import SeederError

    try:
        soak = Soak(args)
    except SeederError as exc:  # Neo4j not reachable: nothing was created
        print(f"error: {exc}", file=sys.stderr)
        return 1
    status = 1
    try:
        soak.generate()
        soak.ingest_a()
        soak.prepare()
        soak.run()
        status = soak.report(soak.check())
    except KeyboardInterrupt:
        print("interrupted: stopping, then dropping the soak datasets", file=sys.stderr)
        status = 130
    except Exception:  # a failure of the benchmark itself: shown whole, then the same clean-up
        traceback.print_exc()
    finally:
        status = max(status, soak.close())
    return status


if __name__ == "__main__":
    sys.exit(main())
