"""On-disk cache of extracted query subgraphs, so training never queries Neo4j again.

A split is a folder of shards ``shard-00000.npz``; each holds a few hundred subgraphs as
concatenated arrays with offsets, plus the query embeddings. Shards are written atomically
(temp file, then rename), so a killed extraction resumes at the first missing shard.
"""
from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from seeder_dgl.errors import SeederError
from seeder_dgl.fileio import atomic_write_bytes, atomic_write_json
from seeder_dgl.subgraph.record import QuerySubgraph, stack_answer_types, stack_relation_scores


class CacheError(SeederError):
    """A cache file is missing or damaged."""


def shard_path(folder: Path, index: int) -> Path:
    return Path(folder) / f"shard-{index:05d}.npz"


def save_shard(path: Path, records: list[QuerySubgraph], query_emb: np.ndarray) -> None:
    node_off = np.cumsum([0] + [r.num_nodes for r in records])
    edge_off = np.cumsum([0] + [int(r.src.shape[0]) for r in records])

    def cat(arrays, dtype):
        return np.concatenate(arrays).astype(dtype) if arrays else np.zeros(0, dtype)

    payload = dict(
        query_id=np.asarray([r.query_id for r in records], dtype=np.int64),
        num_answers=np.asarray([r.num_answers for r in records], dtype=np.int64),
        node_offsets=node_off.astype(np.int64), edge_offsets=edge_off.astype(np.int64),
        node_ids=cat([r.node_ids for r in records], np.int64), hop=cat([r.hop for r in records], np.int8),
        score=cat([r.score for r in records], np.float32),
        labels=cat([r.labels if r.labels.shape[0] == r.num_nodes else np.zeros(r.num_nodes, bool)
                    for r in records], bool),
        src=cat([r.src for r in records], np.int64), dst=cat([r.dst for r in records], np.int64),
        rel=cat([r.rel for r in records], np.int64),
        query_emb=np.asarray(query_emb, dtype=np.float32),
    )
    relation_scores = stack_relation_scores(records)
    if relation_scores is not None:
        payload["relation_scores"] = relation_scores
    if all(r.direction.shape[0] == r.src.shape[0] for r in records):
        payload["direction"] = cat([r.direction for r in records], np.int8)
    answer_types = stack_answer_types(records)
    if answer_types is not None:
        payload["answer_types"], payload["answer_type_names"] = answer_types[0], np.asarray(answer_types[1], dtype=str)
    buffer = io.BytesIO()
    np.savez(buffer, **payload)
    atomic_write_bytes(path, buffer.getvalue())


def load_shard(path: Path) -> tuple[list[QuerySubgraph], np.ndarray]:
    try:
        with np.load(path) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise CacheError(f"subgraph cache {path} is damaged ({exc.__class__.__name__}): delete it and run "
                         "`seeder-dgl extract` again") from exc
    no, eo = data["node_offsets"], data["edge_offsets"]
    records = []
    type_names = tuple(str(t) for t in data["answer_type_names"]) if "answer_types" in data else ()
    for i, qid in enumerate(data["query_id"]):
        a, b, c, d = no[i], no[i + 1], eo[i], eo[i + 1]
        records.append(QuerySubgraph(
            query_id=int(qid), node_ids=data["node_ids"][a:b], hop=data["hop"][a:b], score=data["score"][a:b],
            src=data["src"][c:d], dst=data["dst"][c:d], rel=data["rel"][c:d], labels=data["labels"][a:b],
            num_answers=int(data["num_answers"][i]),
            **({"direction": data["direction"][c:d]} if "direction" in data else {}),
            **({"relation_scores": data["relation_scores"][i]} if "relation_scores" in data else {}),
            **({"answer_types": data["answer_types"][i], "answer_type_names": type_names} if type_names else {})))
    return records, data["query_emb"]


def load_split(folder: Path) -> tuple[list[QuerySubgraph], np.ndarray]:
    """Every shard of a split, in order: records and the matching query embeddings [Q, d]."""
    folder = Path(folder)
    manifest = folder / "manifest.json"
    if not manifest.exists():
        raise CacheError(f"no extracted subgraphs in {folder}: run `seeder-dgl extract` for this split first")
    info = json.loads(manifest.read_text())
    records, embs = [], []
    for i in range(info["num_shards"]):
        path = shard_path(folder, i)
        if not path.exists():
            raise CacheError(f"{path} is missing: run `seeder-dgl extract` again to finish the split")
        r, e = load_shard(path)
        records.extend(r)
        embs.append(e)
    emb = np.concatenate(embs) if embs else np.zeros((0, 0), np.float32)
    return records, emb


def write_manifest(folder: Path, info: dict) -> None:
    atomic_write_json(Path(folder) / "manifest.json", info)
