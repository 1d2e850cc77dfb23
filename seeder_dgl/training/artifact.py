"""The trained retriever: everything ``query``, ``serve`` and ``eval`` need beside the policy's weights,
in one file of the run folder (``retriever.json`` beside ``best.pt``).

``train`` writes it (atomically, before each ``best.pt``) from what the training subgraphs were
grown with: the retrieval settings (k0, per-hop budgets, seeding), the relation prior and entity
linker (their JSON exactly as the dataset's record held them, checked against the fingerprints the
subgraph cache recorded), the encoder's name and dimension, and the graph it was trained on (its
identity, its label and relation types, and their fingerprint). ``inference.load_trained_retriever``
reads it, checks it against the graph and loads the policy with it.

So a trained retriever answers with what it was trained with: ``tune`` and ``extract --refit-prior``
change the dataset's record (what the next ``extract`` and ``train`` use, and the baselines), never
a run folder. The record points to the active run (``active_run``, set by ``train``). A run folder
without this file (trained before it existed) is loaded as before, with the record's prior.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from seeder_dgl.datasets import DatasetContext, RetrievalDefaults, model_label, profile_flag, runs_root
from seeder_dgl.errors import SeederError
from seeder_dgl.fileio import atomic_write_json
from seeder_dgl.graphstore.live import prior_digest
from seeder_dgl.retrieval.linking import EntityLinker
from seeder_dgl.retrieval.pipeline import parse_stored
from seeder_dgl.retrieval.relation_prior import RelationPrior
from seeder_dgl.training.checkpoint import CheckpointError, one_line

ARTIFACT = "retriever.json"
FORMAT = "seeder-dgl/retriever"
FORMAT_VERSION = 1


def schema_fingerprint(label: str, relation_types) -> str:
    """Identifies a graph's schema as a policy sees it: its node label and its relation types, in the
    record's order (relation type i is the policy's relation id i)."""
    text = json.dumps([label, list(relation_types)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrainedRetriever:
    """What a training run's policy was trained with, and ``query`` must retrieve with."""

    dataset: str
    """The dataset's name (its Neo4j record)."""
    profile: str
    """The retrieval profile the subgraphs were extracted with ('deep', 'paper', 'tuned')."""
    seeds: int
    """k0: seeds per question."""
    budgets: tuple[int, ...]
    """Nodes added at each hop of K-hop-with-filtering."""
    seeding: str
    """dense, fulltext or hybrid."""
    follows_prior: bool
    """K-hop scores relations with ``relation_prior`` (else sim(q, r); the prior may still give the
    linker its relation features)."""
    relation_prior: str | None
    """The relation prior's JSON as the dataset's record held it (None: none)."""
    entity_linker: str | None
    """The entity linker's JSON as the dataset's record held it (None: the hand-set one)."""
    embedding_model: str
    """The encoder of the graph's nodes and the questions."""
    dimension: int
    """Its embeddings' dimension."""
    label: str
    """The dataset's node label in Neo4j."""
    relation_types: tuple[str, ...]
    """The graph's relation types in training, in the record's order (the policy's relation ids)."""
    schema: str
    """``schema_fingerprint`` of ``label`` and ``relation_types``."""
    graph: str | None
    """The graph's identity (``DatasetInfo.identity``; None: unknown)."""
    data_fingerprint: str | None = None
    """The run's train/val subgraphs (``run_state.data_fingerprint``), as its checkpoints record."""
    checkpoint: str = "best.pt"
    """The policy's file in the run folder."""
    format_version: int = FORMAT_VERSION

    @property
    def prior_digest(self) -> str | None:
        """What the run's checkpoints record of the prior K-hop followed (``bound_to``)."""
        return prior_digest(self.relation_prior) if self.follows_prior else None

    def to_dict(self) -> dict:
        return {"format": FORMAT, **dataclasses.asdict(self), "budgets": list(self.budgets),
                "relation_types": list(self.relation_types)}

    @classmethod
    def from_dict(cls, data: dict, path: Path) -> "TrainedRetriever":
        """One-line ``CheckpointError`` for another file, a newer format, or a damaged one."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CheckpointError(f"{path} is not a seeder-dgl trained retriever: train again "
                                  "(`seeder-dgl train <dataset>`)")
        fields = {f.name for f in dataclasses.fields(cls)}
        try:
            if int(data.get("format_version", 0)) > FORMAT_VERSION:
                raise CheckpointError(f"{path} has format version {data['format_version']}, newer than this "
                                      f"seeder-dgl reads ({FORMAT_VERSION}): upgrade seeder-dgl")
            out = cls(**{k: v for k, v in data.items() if k in fields})
            return dataclasses.replace(out, seeds=int(out.seeds), dimension=int(out.dimension),
                                       budgets=tuple(int(b) for b in out.budgets),
                                       relation_types=tuple(str(t) for t in out.relation_types))
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{path} is damaged ({one_line(exc, 100)}): train again "
                                  f"(`seeder-dgl train {data.get('dataset', '<dataset>')}`)") from None

    def check_fits(self, info, path: Path) -> None:
        """A one-line ``CheckpointError`` unless the graph ``info`` describes is the one this was
        trained on: same dataset and graph, encoder and dimension, label and relation types. Relation
        types added since (upserts) are accepted: the policy gives them its unknown-relation slot."""
        again = f"train again on this graph (`seeder-dgl train {self.dataset}{profile_flag(self.profile)}`)"
        if info.name != self.dataset:
            raise CheckpointError(f"{path} was trained on dataset {self.dataset!r}, not {info.name!r}: "
                                  f"pass a {info.name} run or train one (`seeder-dgl train {info.name}`)")
        if self.graph and info.identity and self.graph != info.identity:
            raise CheckpointError(f"{path} was trained on another graph named {self.dataset!r} (the dataset was "
                                  f"dropped and ingested or adopted again since): {again}")
        if model_label(info.model) != model_label(self.embedding_model) or int(info.dimension) != self.dimension:
            raise CheckpointError(f"{path} was trained on {self.embedding_model} embeddings of {self.dimension} "
                                  f"dimensions, but the graph has {info.model} ones of {info.dimension}: {again}")
        if schema_fingerprint(info.label, info.relation_types) == self.schema:
            return
        if info.label != self.label:
            raise CheckpointError(f"{path} was trained on nodes labelled {self.label}, the dataset's are "
                                  f"{info.label} now: {again}")
        now = tuple(info.relation_types[:len(self.relation_types)])
        if now != self.relation_types:  # a relation type was removed or renamed: the relation ids moved
            gone = [t for t in self.relation_types if t not in info.relation_types]
            what = f"relation types {', '.join(gone[:3])} are gone" if gone else "its relation types were reordered"
            raise CheckpointError(f"{path} does not fit the graph's schema any more ({what}): {again}")


def artifact_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / ARTIFACT


def write_trained_retriever(run_dir: str | Path, retriever: TrainedRetriever) -> Path:
    """``retriever.json`` in ``run_dir``, atomically (a reader sees the old file or the new one)."""
    return atomic_write_json(artifact_path(run_dir), retriever.to_dict())


def read_trained_retriever(run_dir: str | Path) -> TrainedRetriever | None:
    """The trained retriever of a run folder; None for a folder without one (trained before it
    existed); a one-line ``CheckpointError`` when it cannot be read."""
    path = artifact_path(run_dir)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is damaged ({one_line(exc, 100)}): train again, or pass another run's "
                              "--checkpoint") from None
    return TrainedRetriever.from_dict(data, path)


def from_extraction(info, profile: str, defaults: RetrievalDefaults, manifest: dict | None) -> TrainedRetriever:
    """The trained retriever of a run on the subgraphs a train split's cache ``manifest`` describes:
    the settings they were grown with (else the profile's ``defaults``), and the record's relation
    prior and entity linker, which must be the ones they were grown with (one-line ``SeederError``
    otherwise: the record changed since ``extract``)."""
    grown = (manifest or {}).get("settings") or {}
    follows = "relation_prior" in grown if grown else defaults.relation_prior
    seeding = str(grown.get("seeding", defaults.seeding))
    name = info.name
    refit = f"fit it again with `seeder-dgl extract {name} --refit-prior`"
    again = (f"the record holds another one since (tune or extract --refit-prior): extract them again "
             f"(`seeder-dgl extract {name}{profile_flag(profile)} --overwrite`), then train")
    prior_text = info.relation_prior
    prior = parse_stored(prior_text, RelationPrior.from_json, "relation prior", f"for {name!r}", refit)
    if grown and follows:
        grown_with = grown["relation_prior"]
        if prior is None or grown_with not in {prior.fingerprint, prior.aligned(info.relation_types).fingerprint}:
            raise SeederError(f"{name}'s training subgraphs were grown with relation prior {grown_with}, and "
                              f"{again}")
    linker_text = info.entity_linker if seeding != "dense" else None
    if grown and "linker" not in grown:
        linker_text = None  # grown with the hand-set linker
    linker = parse_stored(linker_text, EntityLinker.from_json, "entity linker", f"for {name!r}", refit)
    if grown and grown.get("linker") != (linker.fingerprint if linker is not None else None):
        raise SeederError(f"{name}'s training subgraphs were grown with entity linker {grown['linker']}, and {again}")
    if not follows and (linker is None or not linker.relation_features):
        prior_text = None  # neither K-hop nor the linker reads it
    return TrainedRetriever(
        dataset=name, profile=profile, seeds=int(grown.get("seeds", defaults.seeds)),
        budgets=tuple(int(b) for b in grown.get("budgets", defaults.budgets)), seeding=seeding,
        follows_prior=bool(follows and prior_text), relation_prior=prior_text, entity_linker=linker_text,
        embedding_model=model_label(info.model), dimension=int(info.dimension), label=info.label,
        relation_types=tuple(info.relation_types), schema=schema_fingerprint(info.label, info.relation_types),
        graph=info.identity)


def run_pointer(run_dir: str | Path) -> str:
    """How the dataset's record names a run folder: relative to the runs folder when inside it (the
    record is shared by every machine that reads the dataset), else its absolute path."""
    run_dir = Path(run_dir).resolve()
    try:
        return run_dir.relative_to(runs_root()).as_posix()
    except ValueError:
        return str(run_dir)


def active_run_dir(context: DatasetContext, info) -> Path:
    """The run folder whose trained retriever serves ``context``'s profile: the one the record points
    to when it was trained with that profile and holds a trained retriever here, else the profile's own."""
    if info.active_run and info.active_run_profile == context.profile:
        folder = Path(info.active_run)
        folder = folder if folder.is_absolute() else runs_root() / folder
        if artifact_path(folder).is_file():
            return folder
    return context.run_dir()
