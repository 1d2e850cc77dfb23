"""STaRK semi-structured knowledge bases (Prime, MAG, Amazon) and their question sets.

The knowledge graphs come in STaRK's processed format, one folder holding

    node_info.pkl       dict node id -> dict of attributes
    edge_index.pt       LongTensor [2, E]
    edge_types.pt       LongTensor [E]
    node_types.pt       LongTensor [N]
    edge_type_dict.pkl  dict relation id -> relation name
    node_type_dict.pkl  dict node type id -> node type name

Node documents follow STaRK's ``get_doc_info`` per dataset and node type, in the compact form
(one line, ``key: value. key: value``) and without the relation listing by default (the graph
search sees the relations itself; ``add_rel=True`` appends a capped listing).
"""
from __future__ import annotations

import ast
import csv
import math
import os
import pickle
import shutil
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from loaders.kg import DataError, KnowledgeGraph, Query, QASet, atomic_write
from seeder_dgl.paths import project_root, shared_data_dir

try:  # the download path needs it; loading local files does not
    from huggingface_hub import hf_hub_download
except ImportError:  # pragma: no cover - huggingface_hub is a dependency
    hf_hub_download = None

DATASETS = ("prime", "mag", "amazon")
HF_REPO = "snap-stanford/stark"
FILES = ("node_info.pkl", "edge_index.pt", "edge_types.pt", "node_types.pt",
         "edge_type_dict.pkl", "node_type_dict.pkl")
# Byte sizes of the official processed Prime files (the hub's records): a download that differs
# is truncated or a different release.
PRIME_SIZES = {
    "node_info.pkl": 70_747_199,
    "edge_index.pt": 129_608_692,
    "edge_types.pt": 64_804_724,
    "node_types.pt": 1_035_700,
    "edge_type_dict.pkl": 330,
    "node_type_dict.pkl": 181,
}
# MAG's processed files carry no type dictionaries: STaRK's MagSKB always supplies these two.
MAG_NODE_TYPES = {0: "author", 1: "institution", 2: "field_of_study", 3: "paper"}
MAG_EDGE_TYPES = {
    0: "author___affiliated_with___institution",
    1: "paper___cites___paper",
    2: "paper___has_topic___field_of_study",
    3: "author___writes___paper",
}
# Amazon's full graph (products plus brand/category/color nodes) is cached here inside processed/.
AMAZON_SUBDIR = Path("cache") / "brand-category-color"

DEFAULT_QA_ROOT = shared_data_dir() / "stark" / "qa"
DEFAULT_CACHE = project_root() / ".cache" / "stark"

_GENE_KEYS = {
    "name": "gene name",
    "type_of_gene": "gene types",
    "alias": "other gene names",
    "other_names": "extended other gene names",
    "genomic_pos": "genomic position",
    "generif": "PubMed text",
    "interpro": "protein family and classification information",
    "summary": "protein summary text",
}


class SkbFormatError(DataError):
    """A STaRK SKB folder or question file is missing, truncated or malformed."""


def _fix_hint(name: str | None) -> str:
    what = name if name in DATASETS else "<name>"
    return f"re-download with `seeder-dgl ingest {what}` or pass --source DIR with the processed files"


# ---- finding, fetching and verifying the processed files ----------------------------------------
def find_processed_dir(folder: str | os.PathLike, name: str | None = None) -> Path:
    """The folder under ``folder`` that holds ``node_info.pkl`` (STaRK zips nest it in processed/)."""
    folder = Path(folder)
    candidates = [folder / AMAZON_SUBDIR, folder / "processed" / AMAZON_SUBDIR] if name == "amazon" else []
    candidates += [folder, folder / "processed"]
    for candidate in candidates:
        if (candidate / "node_info.pkl").is_file():
            return candidate
    raise SkbFormatError(f"no node_info.pkl in {folder} or its processed/ folder: {_fix_hint(name)}")


def verify_sizes(folder: str | os.PathLike, name: str) -> None:
    """Compare Prime's files with the official byte sizes (other datasets have no record here)."""
    if name != "prime":
        return
    for file, expected in PRIME_SIZES.items():
        path = Path(folder) / file
        size = path.stat().st_size if path.exists() else None
        if size != expected:
            raise SkbFormatError(f"{path} has {size if size is not None else 'no'} bytes, the official "
                                 f"Prime file has {expected:,}: {_fix_hint(name)}")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _extract_zip(zip_path: Path, dest: Path, name: str) -> Path:
    """Unpack ``zip_path`` into ``dest`` atomically: a temp folder renamed into place when complete."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        with zipfile.ZipFile(zip_path) as archive:
            root = tmp.resolve()
            for member in archive.namelist():
                # Refuse members that would land outside the target folder.
                if not (root / member).resolve().is_relative_to(root):
                    raise SkbFormatError(f"{zip_path} has an unsafe member {member!r}: {_fix_hint(name)}")
            archive.extractall(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except zipfile.BadZipFile as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SkbFormatError(f"{zip_path} is not a readable zip ({exc}): {_fix_hint(name)}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def fetch_skb(name: str, cache_dir: str | os.PathLike, source: str | os.PathLike | None = None) -> Path:
    """Return the folder holding ``name``'s processed SKB files, downloading them if needed.

    ``source`` may be a folder with the processed files (used in place), a folder holding
    ``processed.zip``, or the zip itself (unpacked into ``cache_dir``). Without ``source`` the
    zip comes from the ``snap-stanford/stark`` dataset on the Hugging Face hub.
    """
    if name not in DATASETS:
        raise SkbFormatError(f"unknown STaRK dataset {name!r}: choose one of {', '.join(DATASETS)}")
    cache = Path(cache_dir) / name
    if source is not None:
        source = Path(source)
        if source.is_dir() and (source / "processed.zip").is_file():
            source = source / "processed.zip"
        if source.is_file():
            folder = find_processed_dir(_extract_zip(source, cache, name), name)
            verify_sizes(folder, name)
            (cache / ".complete").write_text("ok\n")
            return folder
        if source.is_dir():
            return find_processed_dir(source, name)
        raise SkbFormatError(f"--source {source} does not exist: pass a folder with the processed "
                             f"files or a processed.zip")
    marker = cache / ".complete"
    if marker.is_file():
        return find_processed_dir(cache, name)
    if hf_hub_download is None:  # pragma: no cover
        raise SkbFormatError("huggingface_hub is not installed: install it or pass --source DIR")
    try:
        zip_path = hf_hub_download(repo_id=HF_REPO, repo_type="dataset",
                                   filename=f"skb/{name}/processed.zip",
                                   cache_dir=str(Path(cache_dir) / "hf"))
    except Exception as exc:  # network, auth, missing file: all end the same way for the user
        raise SkbFormatError(f"could not download skb/{name}/processed.zip from the Hugging Face hub "
                             f"({_one_line(exc)}): check the network or pass --source DIR with the "
                             f"processed files") from None
    folder = find_processed_dir(_extract_zip(Path(zip_path), cache, name), name)
    verify_sizes(folder, name)
    marker.write_text("ok\n")
    return folder


# ---- reading the files ------------------------------------------------------------------------
def _read_pickle(path: Path, name: str | None) -> Any:
    try:
        with open(path, "rb") as fh:
            return pickle.load(fh)
    except (EOFError, pickle.UnpicklingError, ValueError, IndexError, AttributeError,
            ModuleNotFoundError, TypeError) as exc:
        raise SkbFormatError(f"{path} is truncated or not a pickle ({_one_line(exc)}): "
                             f"{_fix_hint(name)}") from None


def _read_tensor(path: Path, name: str | None) -> np.ndarray:
    import torch

    try:
        value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises RuntimeError/EOFError/UnpicklingError for damaged files
        raise SkbFormatError(f"{path} is truncated or not a torch tensor file ({_one_line(exc)}): "
                             f"{_fix_hint(name)}") from None
    if not isinstance(value, torch.Tensor):
        raise SkbFormatError(f"{path} holds a {type(value).__name__}, expected a tensor: {_fix_hint(name)}")
    return value.numpy()


def _type_table(mapping: Any, path: Path, name: str | None) -> tuple[list[str], dict[int, int]]:
    """Names in id order and a map from the file's ids to positions in that list."""
    if not isinstance(mapping, Mapping) or not mapping:
        raise SkbFormatError(f"{path} should hold a non-empty dict id -> name: {_fix_hint(name)}")
    ids = sorted(int(k) for k in mapping)
    return [str(mapping[k]) for k in sorted(mapping, key=int)], {k: i for i, k in enumerate(ids)}


def _remap(values: np.ndarray, table: dict[int, int], path: Path, what: str, name: str | None) -> np.ndarray:
    values = values.astype(np.int64, copy=False)
    if all(k == v for k, v in table.items()):  # ids are already 0..T-1
        bad = np.flatnonzero((values < 0) | (values >= len(table)))
        out = values
    else:
        keys = np.array(sorted(table), dtype=np.int64)
        pos = np.searchsorted(keys, values).clip(0, len(keys) - 1)
        bad = np.flatnonzero(keys[pos] != values)
        out = pos.astype(np.int64)
    if bad.size:
        raise SkbFormatError(f"{path}: {what} {bad[0]} has type id {values[bad[0]]}, not in the type "
                             f"dictionary ({bad.size} such): {_fix_hint(name)}")
    return out


def load_skb(folder: str | os.PathLike, name: str, add_rel: bool = False, max_rel_neighbors: int = 10,
             max_text_chars: int | None = 4096) -> KnowledgeGraph:
    """Load a STaRK SKB folder into a KnowledgeGraph, checking every file on the way.

    ``name`` ('prime', 'mag', 'amazon', or anything else for a generic document) picks the node
    document format. ``add_rel`` appends STaRK's relation listing (at most ``max_rel_neighbors``
    names per relation); ``max_text_chars`` caps each document (MiniLM reads ~256 tokens anyway).
    """
    folder = find_processed_dir(folder, name)
    paths = {f: folder / f for f in FILES}
    dict_defaults = {"node_type_dict.pkl": MAG_NODE_TYPES, "edge_type_dict.pkl": MAG_EDGE_TYPES}
    for file, path in paths.items():
        if not path.is_file() and not (name == "mag" and file in dict_defaults):
            raise SkbFormatError(f"{path} is missing: {_fix_hint(name)}")
        if path.is_file() and path.stat().st_size == 0:
            raise SkbFormatError(f"{path} is empty (truncated): {_fix_hint(name)}")

    node_info = _read_pickle(paths["node_info.pkl"], name)
    if not isinstance(node_info, Mapping):
        raise SkbFormatError(f"{paths['node_info.pkl']} holds a {type(node_info).__name__}, expected a dict "
                             f"node id -> attributes: {_fix_hint(name)}")
    n = len(node_info)
    if n == 0 or set(node_info) != set(range(n)):
        missing = next((i for i in range(n) if i not in node_info), None)
        raise SkbFormatError(f"{paths['node_info.pkl']}: node ids are not 0..{n - 1}"
                             f"{f' (id {missing} is missing)' if missing is not None else ''}: {_fix_hint(name)}")
    tables = {}
    for file in ("node_type_dict.pkl", "edge_type_dict.pkl"):
        raw = _read_pickle(paths[file], name) if paths[file].is_file() else dict_defaults[file]
        tables[file] = _type_table(raw, paths[file], name)
    type_names, type_ids = tables["node_type_dict.pkl"]
    relation_names, relation_ids = tables["edge_type_dict.pkl"]

    edge_index = _read_tensor(paths["edge_index.pt"], name)
    edge_types = _read_tensor(paths["edge_types.pt"], name).reshape(-1)
    node_types = _read_tensor(paths["node_types.pt"], name).reshape(-1)
    if edge_index.ndim != 2 or edge_index.shape[0] != 2:
        raise SkbFormatError(f"{paths['edge_index.pt']} has shape {tuple(edge_index.shape)}, expected "
                             f"[2, E]: {_fix_hint(name)}")
    num_edges = edge_index.shape[1]
    if edge_types.shape[0] != num_edges:
        raise SkbFormatError(f"{paths['edge_types.pt']} has {edge_types.shape[0]} entries but edge_index.pt "
                             f"has {num_edges} edges: {_fix_hint(name)}")
    if node_types.shape[0] != n:
        raise SkbFormatError(f"{paths['node_types.pt']} has {node_types.shape[0]} entries but node_info.pkl "
                             f"has {n} nodes: {_fix_hint(name)}")
    edge_index = edge_index.astype(np.int64, copy=False)
    bad = np.flatnonzero(((edge_index < 0) | (edge_index >= n)).any(axis=0))
    if bad.size:
        j = int(bad[0])
        raise SkbFormatError(f"{paths['edge_index.pt']}: edge {j} ({edge_index[0, j]} -> {edge_index[1, j]}) "
                             f"refers to a node id outside 0..{n - 1} ({bad.size} such edges): {_fix_hint(name)}")
    node_type = _remap(node_types, type_ids, paths["node_types.pt"], "node", name)
    edge_rel = _remap(edge_types, relation_ids, paths["edge_types.pt"], "edge", name)

    infos = [node_info[i] if isinstance(node_info[i], Mapping) else {} for i in range(n)]
    node_types_str = [type_names[t] for t in node_type.tolist()]
    names = [node_name(info, t, i, name) for i, (info, t) in enumerate(zip(infos, node_types_str))]
    texts = [node_document(info, t, name) or names[i] for i, (info, t) in enumerate(zip(infos, node_types_str))]
    kg = KnowledgeGraph(name=name, node_names=names, node_texts=texts, node_type=node_type,
                        node_type_names=type_names, edge_src=np.ascontiguousarray(edge_index[0]),
                        edge_dst=np.ascontiguousarray(edge_index[1]), edge_rel=edge_rel,
                        relation_names=relation_names)
    if add_rel:
        extra = relation_listing(kg, max_rel_neighbors, name)
        kg.node_texts = [f"{t}. {r}" if r else t for t, r in zip(kg.node_texts, extra)]
    if max_text_chars:
        kg.node_texts = [t if len(t) <= max_text_chars else t[:max_text_chars] for t in kg.node_texts]
    kg.validate()
    return kg


# ---- node names and documents (after STaRK's get_doc_info, compact form) ---------------------------
def _missing(value: Any) -> bool:
    """STaRK marks absent values as None, NaN, '' or -1 (MAG's CSV merge)."""
    if value is None:
        return True
    if isinstance(value, (float, np.floating)):
        return math.isnan(value) or value == -1
    if isinstance(value, (int, np.integer)):
        return value == -1
    if isinstance(value, (list, tuple, dict, np.ndarray)):
        return len(value) == 0
    return str(value).strip() in ("", "nan", "-1", "None")


def _text(value: Any) -> str:
    """A readable one-line rendering of an attribute value (lists joined, dicts as key: value)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # counts merged through pandas arrive as floats
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items() if not _missing(v))
    if isinstance(value, (list, tuple, np.ndarray)):
        return ", ".join(_text(v) for v in value if not _missing(v))
    return " ".join(str(value).split())


def _first(info: Mapping, *keys: str) -> str | None:
    for key in keys:
        if key in info and not _missing(info[key]):
            return _text(info[key])
    return None


def node_name(info: Mapping, node_type: str, idx: int, dataset: str | None = None) -> str:
    """Short display name: entity name, paper or product title, brand/category/color name."""
    if dataset == "amazon" and node_type != "product":
        name = _first(info, f"{node_type}_name", "name")
    else:
        name = _first(info, "name", "title", "DisplayName", f"{node_type}_name")
    return name if name else f"{node_type} {idx}"


def _join(parts: list[tuple[str, Any]]) -> str:
    """``key: value. key: value`` (STaRK's compact form, which also avoids doubled full stops)."""
    out = ""
    for key, value in parts:
        if value in (None, ""):
            continue
        if out:
            out += " " if out.endswith(".") else ". "
        out += f"{key}: {value}"
    return out


def _prime_doc(info: Mapping, node_type: str) -> str:
    parts: list[tuple[str, Any]] = [("name", _first(info, "name")), ("type", _first(info, "type") or node_type),
                                    ("source", _first(info, "source"))]
    details = info.get("details")
    detail_parts = []
    if isinstance(details, Mapping):
        for key, value in details.items():
            key = str(key)
            if _missing(value) or key.startswith("_") or "_id" in key:
                continue
            if node_type == "gene/protein" and key in _GENE_KEYS:
                # STaRK unpacks these structured fields before printing them.
                if key == "interpro":
                    items = [value] if isinstance(value, Mapping) else value
                    value = [v.get("desc") for v in items if isinstance(v, Mapping)]
                elif key == "generif" and isinstance(value, list):
                    value = "; ".join(str(v.get("text", "")) for v in value if isinstance(v, Mapping))
                elif key == "genomic_pos" and isinstance(value, list):
                    value = value[0] if value else None
                detail_parts.append((f"{key} ({_GENE_KEYS[key]})", _text(value)))
            else:
                detail_parts.append((key, _text(value)))
    text = _join(parts)
    if detail_parts:
        text += (" " if text.endswith(".") else ". ") + "details: " + _join(detail_parts)
    return text


def _mag_doc(info: Mapping, node_type: str) -> str:
    if node_type == "paper":
        parts = [("paper title", _first(info, "title")), ("abstract", _first(info, "abstract")),
                 ("publication date", _first(info, "Date"))]
        for label, key in (("venue", "OriginalVenue"), ("journal", "JournalDisplayName"),
                           ("conference", "ConferenceSeriesDisplayName"),
                           ("conference", "ConferenceInstancesDisplayName")):
            if _first(info, key):  # STaRK prints the first venue-like field present
                parts.append((label, _first(info, key)))
                break
        return _join(parts)
    label = {"author": "author name", "field_of_study": "field of study",
             "institution": "institution"}.get(node_type, node_type)
    count_label = {"author": "author", "field_of_study": "field", "institution": "institution"}.get(node_type,
                                                                                                 node_type)
    return _join([(label, _first(info, "DisplayName", "name")),
                  (f"{count_label} paper count", _first(info, "PaperCount")),
                  (f"{count_label} citation count", _first(info, "CitationCount"))])


def _amazon_doc(info: Mapping, node_type: str, max_entries: int = 25) -> str:
    if node_type != "product":
        return _join([(f"{node_type} name", _first(info, f"{node_type}_name", "name"))])
    parts: list[tuple[str, Any]] = [("product", _first(info, "title")), ("brand", _first(info, "brand"))]
    details = info.get("details")
    if isinstance(details, Mapping):
        inner = details.get("dictionary", details)
        dims = inner.get("product_dimensions") if isinstance(inner, Mapping) else None
        if isinstance(dims, str) and " ; " in dims:
            dimensions, weight = dims.split(" ; ", 1)
            parts += [("dimensions", dimensions), ("weight", weight)]
    description = info.get("description")
    if not _missing(description):
        parts.append(("description", _text(" ".join(description) if isinstance(description, list) else description)))
    features = info.get("feature")
    if isinstance(features, list):
        shown = [f"#{i + 1}: {_text(f)}" for i, f in enumerate(features) if f and "asin" not in str(f).lower()]
        parts.append(("features", " ".join(shown)))
    reviews = info.get("review")
    if isinstance(reviews, list) and reviews:
        def votes(review: Any) -> int:
            vote = review.get("vote") if isinstance(review, Mapping) else None
            try:
                return 0 if _missing(vote) else int(str(vote).replace(",", ""))
            except ValueError:
                return 0
        order = sorted(range(len(reviews)), key=lambda i: -votes(reviews[i]))[: max_entries + 2]
        shown = [f"#{i + 1}: summary: {_text(reviews[i].get('summary', ''))} text: "
                 f"\"{_text(reviews[i].get('reviewText', ''))}\"" for i in order if isinstance(reviews[i], Mapping)]
        parts.append(("reviews", " ".join(shown)))
    qas = info.get("qa")
    if isinstance(qas, list) and qas:
        shown = [f"#{i + 1}: question: \"{_text(q.get('question', ''))}\" answer: \"{_text(q.get('answer', ''))}\""
                 for i, q in enumerate(qas[: max_entries + 2]) if isinstance(q, Mapping)]
        parts.append(("Q&A", " ".join(shown)))
    return _join(parts)


def _generic_doc(info: Mapping, node_type: str) -> str:
    """Any other SKB: its own 'text' attribute when it has one, else every attribute."""
    if not _missing(info.get("text")):
        return str(info["text"])
    return _join([(str(k), _text(v)) for k, v in info.items() if not _missing(v)])


def node_document(info: Mapping, node_type: str, dataset: str | None = None) -> str:
    """The text embedded for one node, following STaRK's ``get_doc_info`` for ``dataset``."""
    if dataset == "prime":
        return _prime_doc(info, node_type)
    if dataset == "mag":
        return _mag_doc(info, node_type)
    if dataset == "amazon":
        return _amazon_doc(info, node_type)
    return _generic_doc(info, node_type)


def relation_listing(kg: KnowledgeGraph, max_neighbors: int = 10, dataset: str | None = None) -> list[str]:
    """Per node, STaRK's relation listing in compact form: ``relations: rel: {type: (a, b)}, ...``.

    Neighbours are taken in both directions and capped per relation, so hubs stay short.
    """
    n = kg.num_nodes
    node = np.concatenate([kg.edge_src, kg.edge_dst])
    other = np.concatenate([kg.edge_dst, kg.edge_src])
    rel = np.concatenate([kg.edge_rel, kg.edge_rel])
    order = np.lexsort((other, rel, node))
    node, other, rel = node[order], other[order], rel[order]
    # Keep the first max_neighbors of every (node, relation) group.
    group = node * len(kg.relation_names) + rel
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    rank = np.arange(group.size) - np.repeat(starts, np.diff(np.r_[starts, group.size]))
    keep = rank < max_neighbors
    node, other, rel = node[keep], other[keep], rel[keep]
    bounds = np.searchsorted(node, np.arange(n + 1))
    names, types = kg.node_names, kg.node_type.tolist()
    out = []
    for v in range(n):
        lo, hi = bounds[v], bounds[v + 1]
        if lo == hi:
            out.append("")
            continue
        pieces: list[str] = []
        for r in np.unique(rel[lo:hi]).tolist():
            members = other[lo:hi][rel[lo:hi] == r].tolist()
            by_type: dict[int, list[str]] = {}
            for u in members:
                by_type.setdefault(types[u], []).append(names[u])
            inner = ", ".join(f"{kg.node_type_names[t]}: ({', '.join(us)})" for t, us in by_type.items())
            rel_name = kg.relation_names[r].replace("___", " ").replace(" ", "_")
            pieces.append(f"{rel_name}: {{{inner}}}")
        out.append("relations: " + ", ".join(pieces))
    return out


# ---- writing a (tiny) SKB in the same format ------------------------------------------------------
def write_skb(kg_like: KnowledgeGraph | Mapping[str, Any], folder: str | os.PathLike) -> Path:
    """Write an SKB folder in STaRK's processed format; every file is written atomically.

    ``kg_like`` is a KnowledgeGraph (node_info then holds name, type and text, which the generic
    loader reads back verbatim) or a mapping with the six raw parts: ``node_info``,
    ``edge_index`` ([2, E]), ``edge_types``, ``node_types``, ``edge_type_dict``, ``node_type_dict``.
    """
    import torch

    if isinstance(kg_like, KnowledgeGraph):
        kg = kg_like
        parts: dict[str, Any] = {
            "node_info": {i: {"name": kg.node_names[i], "type": kg.node_type_names[int(kg.node_type[i])],
                              "text": kg.node_texts[i]} for i in range(kg.num_nodes)},
            "edge_index": np.stack([kg.edge_src, kg.edge_dst]),
            "edge_types": kg.edge_rel,
            "node_types": kg.node_type,
            "edge_type_dict": dict(enumerate(kg.relation_names)),
            "node_type_dict": dict(enumerate(kg.node_type_names)),
        }
    else:
        parts = dict(kg_like)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("node_info", "edge_type_dict", "node_type_dict"):
        with atomic_write(folder / f"{key}.pkl") as tmp, open(tmp, "wb") as fh:
            pickle.dump(dict(parts[key]), fh)
    for key in ("edge_index", "edge_types", "node_types"):
        tensor = torch.as_tensor(np.asarray(parts[key], dtype=np.int64))
        with atomic_write(folder / f"{key}.pt") as tmp:
            torch.save(tensor, tmp)
    return folder


# ---- questions ----------------------------------------------------------------------------------
def default_qa_root() -> Path | None:
    """``../shared/data/stark/qa`` next to the project root (seeder_dgl.paths) when it is there."""
    return DEFAULT_QA_ROOT if DEFAULT_QA_ROOT.is_dir() else None


def load_stark_qa(qa_root: str | os.PathLike | None = None, name: str = "prime") -> QASet:
    """Read ``<qa_root>/<name>/stark_qa/stark_qa.csv`` and the official train/val/test splits."""
    root = Path(qa_root) if qa_root is not None else default_qa_root()
    if root is None:
        raise SkbFormatError(f"no STaRK question folder found (looked for {DEFAULT_QA_ROOT}): set SEEDER_STARK_QA=DIR "
                             f"holding {name}/stark_qa/stark_qa.csv and {name}/split/")
    base = root / name
    csv_path = base / "stark_qa" / "stark_qa.csv"
    if not csv_path.is_file():
        raise SkbFormatError(f"{csv_path} is missing: set SEEDER_STARK_QA=DIR holding {name}/stark_qa/stark_qa.csv "
                             f"(the qa/{name} folder of the snap-stanford/stark dataset)")
    queries: dict[int, Query] = {}
    with open(csv_path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = {"id", "query", "answer_ids"} - set(reader.fieldnames or [])
        if missing:
            raise SkbFormatError(f"{csv_path} lacks the column(s) {', '.join(sorted(missing))}: expected "
                                 f"id,query,answer_ids")
        for row_no, row in enumerate(reader, start=1):
            try:
                qid = int(row["id"])
                answers = ast.literal_eval(row["answer_ids"])
                if not isinstance(answers, (list, tuple)):
                    raise ValueError("answer_ids is not a list")
                answers = [int(a) for a in answers]
                text = row["query"]
                if text is None:
                    raise ValueError("no query text")
            except (ValueError, SyntaxError, TypeError) as exc:
                raise SkbFormatError(f"{csv_path}, data row {row_no}: malformed ({_one_line(exc)}); expected "
                                     f"id,query,answer_ids with answer_ids like [1, 2]") from None
            if qid in queries:
                raise SkbFormatError(f"{csv_path}, data row {row_no}: query id {qid} appears twice")
            queries[qid] = Query(id=qid, text=text, answers=answers)
    splits: dict[str, list[int]] = {}
    for split in ("train", "val", "test"):
        path = base / "split" / f"{split}.index"
        if not path.is_file():
            raise SkbFormatError(f"{path} is missing: set SEEDER_STARK_QA=DIR holding {name}/split/{split}.index")
        ids = []
        for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                qid = int(line.strip())
            except ValueError:
                raise SkbFormatError(f"{path}, line {line_no}: {line.strip()!r} is not a query id") from None
            if qid not in queries:
                raise SkbFormatError(f"{path}, line {line_no}: query id {qid} is not in {csv_path}")
            ids.append(qid)
        splits[split] = ids
    return QASet(name=name, queries=queries, splits=splits)


def load_stark(name: str, cache_dir: str | os.PathLike | None = None, source: str | os.PathLike | None = None,
               qa_root: str | os.PathLike | None = None, **skb_options: Any) -> tuple[KnowledgeGraph, QASet]:
    """Fetch (or find) and load one STaRK dataset with its questions; answers must be node ids of the graph."""
    folder = fetch_skb(name, cache_dir if cache_dir is not None else DEFAULT_CACHE, source)
    kg = load_skb(folder, name, **skb_options)
    qa = load_stark_qa(qa_root, name)
    for query in qa.queries.values():
        bad = [a for a in query.answers if not 0 <= a < kg.num_nodes]
        if bad:
            raise SkbFormatError(f"query {query.id} of {name} has answer id {bad[0]}, outside the graph's "
                                 f"0..{kg.num_nodes - 1}: the questions and the SKB files are from different "
                                 f"datasets or releases")
    return kg, qa
