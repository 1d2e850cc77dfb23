"""A small generated knowledge graph of people, companies and places, written the ways users
write their own graphs (triples in several separators, node/edge tables in several formats), with
1- and 2-hop questions answered by name, no topic marked and no split given."""
from __future__ import annotations

import contextlib
import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FIRST = ["Ada", "Boris", "Chloe", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal", "Lena",
         "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tamar"]
LAST = ["Okafor", "Lindqvist", "Moreau", "Tanaka", "Kowalski", "Haddad", "Brennan", "Silva", "Novak", "Iyer"]
COMPANIES = ["Acme Robotics", "Blue Fjord Energy", "Cobalt Analytics", "Delta Seeds", "Ember Foods", "Fable Games",
             "Granite Bank", "Helix Pharma", "Ivory Textiles", "Juniper Air", "Kestrel Motors", "Lumen Optics"]
CITIES = ["Lisbon", "Osaka", "Tromso", "Accra", "Lyon", "Gdansk", "Porto", "Sapporo"]
COUNTRIES = {"Lisbon": "Portugal", "Porto": "Portugal", "Osaka": "Japan", "Sapporo": "Japan", "Tromso": "Norway",
             "Accra": "Ghana", "Lyon": "France", "Gdansk": "Poland"}
INDUSTRIES = ["robotics", "energy", "software", "agriculture", "food", "games", "banking", "pharmaceuticals",
              "textiles", "aviation", "automotive", "optics"]


@dataclass
class OwnGraph:
    nodes: list[dict]
    """id, name, type"""
    triples: list[tuple[str, str, str]]
    """(head name, relation, tail name)"""
    questions: list[dict]
    """question, answers (names)"""


def company_graph(seed: int = 0, people: int = 80) -> OwnGraph:
    rng = np.random.default_rng(seed)
    names = sorted({f"{f} {l}" for f in FIRST for l in LAST})
    persons = [names[i] for i in rng.choice(len(names), size=people, replace=False)]
    nodes: list[dict] = []
    for kind, values in (("person", persons), ("company", COMPANIES), ("city", CITIES),
                         ("country", sorted(set(COUNTRIES.values()))), ("industry", INDUSTRIES)):
        nodes += [{"id": f"{kind}-{i}", "name": v, "type": kind} for i, v in enumerate(values)]
    triples: list[tuple[str, str, str]] = []
    works, born = {}, {}
    company_city = {c: CITIES[i % len(CITIES)] for i, c in enumerate(COMPANIES)}
    for c, city in company_city.items():
        triples.append((c, "headquartered in", city))
        triples.append((c, "industry", INDUSTRIES[COMPANIES.index(c)]))
    for city, country in COUNTRIES.items():
        triples.append((city, "located in", country))
    for p in persons:
        works[p] = COMPANIES[int(rng.integers(len(COMPANIES)))]
        born[p] = CITIES[int(rng.integers(len(CITIES)))]
        triples.append((p, "works at", works[p]))
        triples.append((p, "born in", born[p]))
    questions: list[dict] = []
    for p in persons:
        questions.append({"question": f"Where does {p} work?", "answers": [works[p]]})
        questions.append({"question": f"In which country was {p} born?", "answers": [COUNTRIES[born[p]]]})
        questions.append({"question": f"What industry is the employer of {p} in?",
                          "answers": [INDUSTRIES[COMPANIES.index(works[p])]]})
    for c in COMPANIES:
        staff = sorted(p for p in persons if works[p] == c)
        if staff:
            questions.append({"question": f"Who works at {c}?", "answers": staff})
    return OwnGraph(nodes, triples, questions)


def write_triples(graph: OwnGraph, folder: Path, sep: str = "\t", header: bool = False, suffix: str = ".tsv",
                  stem: str = "triples") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}{suffix}"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        if sep == ",":
            writer = csv.writer(fh)
            if header:
                writer.writerow(["head", "relation", "tail"])
            writer.writerows(graph.triples)
        else:
            if header:
                fh.write(sep.join(["subject", "predicate", "object"]) + "\n")
            fh.writelines(sep.join(t) + "\n" for t in graph.triples)
    return path


def write_tables(graph: OwnGraph, folder: Path, fmt: str = "csv") -> tuple[Path, Path]:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    key = {n["name"]: n["id"] for n in graph.nodes}
    nodes = pd.DataFrame(graph.nodes)
    edges = pd.DataFrame([{"source": key[h], "relation": r, "target": key[t]} for h, r, t in graph.triples])
    paths = []
    for frame, stem in ((nodes, "nodes"), (edges, "edges")):
        if fmt == "csv":
            path = folder / f"{stem}.csv"
            frame.to_csv(path, index=False)
        elif fmt == "tsv":
            path = folder / f"{stem}.tsv"
            frame.to_csv(path, index=False, sep="\t")
        elif fmt == "jsonl":
            path = folder / f"{stem}.jsonl"
            frame.to_json(path, orient="records", lines=True)
        elif fmt == "parquet":
            path = folder / f"{stem}.parquet"
            frame.to_parquet(path, index=False)
        else:
            raise ValueError(fmt)
        paths.append(path)
    return paths[0], paths[1]


def write_questions(graph: OwnGraph, folder: Path, fmt: str = "csv") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        path = folder / "questions.csv"
        with open(path, "w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["question", "answers"])
            writer.writerows([q["question"], "|".join(q["answers"])] for q in graph.questions)
    else:
        path = folder / "questions.jsonl"
        path.write_text("".join(json.dumps(q) + "\n" for q in graph.questions), encoding="utf-8")
    return path


def graph_folder(folder: Path, seed: int = 0, people: int = 80) -> OwnGraph:
    """``company_graph(seed, people)`` written into ``folder`` as a triples file and its questions."""
    graph = company_graph(seed=seed, people=people)
    write_triples(graph, folder)
    write_questions(graph, folder)
    return graph


@contextlib.contextmanager
def ingested_graph(neo4j_target, root: Path, name: str, graph: OwnGraph, fmt: str = "csv"):
    """``graph`` written as node/edge tables under ``root`` and ingested as ``name`` on the test
    server, with the process environment (NEO4J_*, caches and runs under ``root``, offline) set
    while the block runs; the dataset is dropped afterwards. Yields that environment (also for a
    server's own process)."""
    import pytest
    from typer.testing import CliRunner

    from seeder_dgl.cli import app

    runner = CliRunner()
    write_tables(graph, root / "graph", fmt)
    env = {"NEO4J_URI": neo4j_target.uri, "NEO4J_USER": neo4j_target.user, "NEO4J_PASSWORD": neo4j_target.password,
           "SEEDER_CACHE": str(root / "cache"), "SEEDER_RUNS": str(root / "runs"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        patch.delenv("SEEDER_EMBEDDINGS", raising=False)
        ingested = runner.invoke(app, ["ingest", name, "--source", str(root / "graph")])
        assert ingested.exit_code == 0, ingested.output
        try:
            yield env
        finally:
            runner.invoke(app, ["drop", name, "--yes"])
