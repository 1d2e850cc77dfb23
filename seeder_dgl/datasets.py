"""The datasets `seeder-dgl` knows by name: where their files come from and their retrieval defaults.

A dataset is a knowledge graph (ingested into Neo4j) plus, for training and evaluation, a
question set. The graph is read from source files only by `ingest`; everything after that reads
Neo4j. Questions are read from their files (they are not part of the graph).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from loaders.kg import KnowledgeGraph, QASet
from seeder_dgl.errors import SeederError

REPO = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_MODEL_NAMES = {None, "", "default", "all-MiniLM-L6-v2", DEFAULT_MODEL}


def cache_root() -> Path:
    """Embeddings, exports, subgraphs (``SEEDER_CACHE``, default ``.cache/`` in the repository)."""
    return Path(os.environ.get("SEEDER_CACHE", REPO / ".cache")).expanduser().resolve()


def runs_root() -> Path:
    """Checkpoints and their run records (``SEEDER_RUNS``, default ``runs/``)."""
    return Path(os.environ.get("SEEDER_RUNS", REPO / "runs")).expanduser().resolve()


def resolve_model(name: str | None) -> str | None:
    """The sentence-transformers model to load: None means the packaged all-MiniLM-L6-v2."""
    return None if name in _DEFAULT_MODEL_NAMES else name


def model_label(name: str | None) -> str:
    """How a model is recorded in Neo4j and run records (portable across machines)."""
    return DEFAULT_MODEL if name in _DEFAULT_MODEL_NAMES else str(name)


@dataclass(frozen=True)
class RetrievalDefaults:
    seeds: int = 3
    """k0: dense seeds."""
    budgets: tuple[int, ...] = (50, 97)
    """b_h per hop of K-hop-with-filtering; B = seeds + sum."""
    seeding: str = "dense"
    """dense (vector index; the paper's tables), fulltext (entity linking on names) or hybrid (fused)."""


@dataclass
class DatasetSpec:
    name: str
    description: str
    load_graph: Callable[[str | None], KnowledgeGraph]
    """source (folder or None) -> graph."""
    load_questions: Callable[[str | None, KnowledgeGraph | None], QASet] | None
    """(source, graph or None) -> questions; None when the dataset has none."""
    retrieval: RetrievalDefaults = field(default_factory=RetrievalDefaults)
    """The 'paper' profile: dense seeding, what the comparison tables use."""
    extra_profiles: dict[str, RetrievalDefaults] = field(default_factory=dict)
    questions_need_graph: bool = False
    """MetaQA maps answer names to ids through the graph's names."""
    default_profile: str = "paper"
    """The profile every command uses without --profile: the best one on the validation split."""


def _stark(name: str) -> DatasetSpec:
    def graph(source):
        from loaders.stark import fetch_skb, load_skb

        return load_skb(fetch_skb(name, cache_root() / "stark", source), name)

    def questions(source, _kg):
        from loaders.stark import load_stark_qa

        return load_stark_qa(os.environ.get("SEEDER_STARK_QA"), name)

    seeds = 10 if name == "amazon" else 3
    return DatasetSpec(name, f"STaRK-{name.capitalize()} (download or --source DIR)", graph, questions,
                       RetrievalDefaults(seeds=seeds, budgets=(50, 97)))


def _metaqa() -> DatasetSpec:
    def graph(source):
        from loaders.metaqa import default_root, load_metaqa_kb

        root = Path(source) if source else default_root()
        if root is None:
            raise SeederError("no MetaQA folder found: pass --source DIR holding kb.txt and qa/{1,2,3}-hop/dev.txt")
        return load_metaqa_kb(root / "kb.txt")[0]

    def questions(source, _kg):
        from loaders.metaqa import load_metaqa

        return load_metaqa(source)[1]

    # 'deep': one full-text-linked seed and three hops within B = 500, chosen on the
    # validation split of the dev questions (`seeder-dgl eval metaqa --coverage`).
    return DatasetSpec("metaqa", "MetaQA WikiMovies KB with 1/2/3-hop questions (../shared/data/metaqa)",
                       graph, questions, RetrievalDefaults(seeds=3, budgets=(50, 97)),
                       extra_profiles={"deep": RetrievalDefaults(seeds=1, budgets=(15, 110, 374), seeding="fulltext")},
                       questions_need_graph=True, default_profile="deep")


def _synthetic() -> DatasetSpec:
    def graph(source):
        from loaders.synthetic import relation_tracing

        return relation_tracing(seed=0)[0]

    def questions(source, _kg):
        from loaders.synthetic import relation_tracing

        return relation_tracing(seed=0)[1]

    return DatasetSpec("synthetic", "relation-tracing graph with compositional queries (generated, seed 0)",
                       graph, questions, RetrievalDefaults(seeds=3, budgets=(30, 60, 60)))


DATASETS: dict[str, DatasetSpec] = {s.name: s for s in
                                    (_stark("prime"), _stark("mag"), _stark("amazon"), _metaqa(), _synthetic())}


def get_spec(name: str) -> DatasetSpec:
    """The dataset by name; a graph ingested under another name uses the MetaQA-like defaults."""
    if name in DATASETS:
        return DATASETS[name]
    raise SeederError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")


def resolve_profile(dataset: str, profile: str | None = None) -> str:
    """``profile``, or the dataset's default when None (MetaQA: 'deep'; every other dataset: 'paper')."""
    if profile is not None:
        return profile
    spec = DATASETS.get(dataset)
    return spec.default_profile if spec else "paper"


def retrieval_profile(dataset: str, profile: str | None = None) -> RetrievalDefaults:
    """The named retrieval settings of a dataset ('paper' for any dataset, e.g. 'deep' for MetaQA);
    None: the dataset's default profile."""
    profile = resolve_profile(dataset, profile)
    spec = DATASETS.get(dataset)
    profiles = {"paper": spec.retrieval if spec else RetrievalDefaults(), **(spec.extra_profiles if spec else {})}
    if profile not in profiles:
        raise SeederError(f"{dataset} has no retrieval profile {profile!r}: choose one of {', '.join(profiles)}")
    return profiles[profile]
