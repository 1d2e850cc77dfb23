"""Batched query subgraphs as plain tensors, and the feature preprocessing (PCA) before them.

``SubgraphBatch`` is the model's graph handle. It follows ``dgl.batch`` semantics without
needing DGL: the subgraphs of a batch are laid out one after another, node indices of graph
``b`` are offset by the node counts of graphs ``0..b-1`` and its edges follow those of the
previous graphs. Message passing never runs on the batch itself but on an induced
``GraphView`` (the nodes of ``V_t ∪ U_t``), which each ops implementation turns into its own
handle (index tensors for the pure-torch path, a ``dgl.graph`` for the DGL path).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np
import torch
from torch import Tensor

from seeder_dgl.subgraph.record import QuerySubgraph, stack_relation_scores


def _exclusive_cumsum(counts: Tensor) -> Tensor:
    return torch.cumsum(counts, 0) - counts


def stable_argsort(values: Tensor) -> Tensor:
    """``torch.sort(values, stable=True).indices`` for non-negative integer ``values`` [m].

    Node indices of a view or a batch fit in 16 bits, and numpy sorts 16-bit integers by radix:
    about 40 µs for 10,000 edges against about 500 for torch's stable sort of int64 on the CPU
    (sorting edges by endpoint happens for every large view of every training step).
    """
    if values.device.type == "cpu" and values.numel():
        low, high = torch.aminmax(values)
        if 0 <= int(low) and int(high) < 65536:
            order = np.argsort(values.numpy().astype(np.uint16), kind="stable")
            return torch.from_numpy(order.astype(np.int64, copy=False))
    return torch.sort(values, stable=True).indices


def _concat_ranges(starts: Tensor, counts: Tensor) -> Tensor:
    """``cat([arange(s, s + c) for s, c in zip(starts, counts)])`` without a Python loop."""
    total = int(counts.sum())
    offsets = _exclusive_cumsum(counts)
    return (torch.arange(total, device=counts.device)
            - offsets.repeat_interleave(counts, output_size=total)
            + starts.repeat_interleave(counts, output_size=total))


@dataclass
class GraphView:
    """An induced subgraph of a ``SubgraphBatch``: the nodes of a mask and the edges between them."""

    nodes: Tensor
    """int64 [k]: batch-node index of each view node, increasing (so graphs stay contiguous)."""
    src: Tensor
    """int64 [m']: view-local source of each kept edge."""
    dst: Tensor
    """int64 [m']: view-local target of each kept edge."""
    rel: Tensor
    """int64 [m']: relation id of each kept edge."""
    num_nodes: int
    """k."""
    direction: Tensor | None = None
    """int64 [m']: each kept edge's direction (``subgraph.record.FORWARD``/``BACKWARD``, 0 unknown);
    None when the batch has none."""


@dataclass
class SubgraphBatch:
    """B query subgraphs as one disjoint graph (``dgl.batch`` layout), with node and query features."""

    src: Tensor
    """int64 [m]: batch-local source of each edge (every KG edge is present in both directions)."""
    dst: Tensor
    """int64 [m]: batch-local target of each edge."""
    rel: Tensor
    """int64 [m]: relation id of each edge."""
    num_nodes: int
    """n: total number of nodes."""
    graph_index: Tensor
    """int64 [n]: which subgraph (query) each node belongs to."""
    x: Tensor
    """float [n, d]: node features (text embeddings after the optional PCA)."""
    query: Tensor
    """float [B, d]: query features, same space as ``x``."""
    hop: Tensor
    """int64 [n]: 0 for seeds, h for nodes K-hop-with-filtering added at hop h."""
    score: Tensor
    """float [n]: cos(q, v) for seeds, the K-hop-with-filtering score otherwise."""
    labels: Tensor
    """bool [n]: node is a gold answer (all False at query time)."""
    num_answers: Tensor
    """int64 [B]: |A(q)|, counting answers outside the subgraph too."""
    node_ids: Tensor
    """int64 [n]: global KG node id of each node."""
    batch_num_nodes: Tensor
    """int64 [B]: nodes per subgraph (the offsets are their exclusive cumsum)."""
    batch_num_edges: Tensor
    """int64 [B]: edges per subgraph; edges are stored graph after graph."""
    node_type: Tensor | None = None
    """int64 [n]: node type id in the policy's type vocabulary (``Preprocessing``); None: no types."""
    relation_scores: Tensor | None = None
    """float [B, hops, R]: the relation terms each subgraph's K-hop followed (a relation prior's);
    None when a subgraph of the batch has none."""
    direction: Tensor | None = None
    """int64 [m]: each edge's direction (``subgraph.record.FORWARD``: the stored relationship goes
    src -> dst, ``BACKWARD``: dst -> src; 0: unknown, a subgraph extracted without them)."""
    origin: Tensor | None = None
    """int64 [n]: for a batch made by ``select_graphs``/``replicate``, each node's index in the batch it
    was made from (per-node results of that batch are gathered with it); None: an original batch."""

    @property
    def num_graphs(self) -> int:
        return int(self.batch_num_nodes.shape[0])

    @property
    def device(self) -> torch.device:
        return self.x.device

    @property
    def seed_mask(self) -> Tensor:
        return self.hop == 0

    @cached_property
    def frontier_order(self) -> Tensor:
        """int64 [n]: every node, grouped by graph, by decreasing K-hop score inside a graph, ties
        by index: the order frontiers are ranked in (``policy.capped_frontier``), sorted once per
        batch instead of once per step. ``score`` must not change after it is read."""
        order = torch.sort(self.score, descending=True, stable=True).indices
        return order[stable_argsort(self.graph_index[order])]

    @property
    def node_offsets(self) -> Tensor:
        """int64 [G]: index of each graph's first node (graph g holds nodes offset_g .. offset_g + n_g − 1)."""
        return _exclusive_cumsum(self.batch_num_nodes)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "SubgraphBatch":
        """Move every tensor to ``device``; ``dtype`` converts the floating tensors only."""
        moved = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                value = value.to(device=device, dtype=dtype if (dtype is not None and value.is_floating_point()) else None)
            moved[f.name] = value
        return SubgraphBatch(**moved)

    def select_graphs(self, index: Tensor, features: bool = True) -> "SubgraphBatch":
        """A new batch made of graphs ``index`` (repeats allowed), in that order.

        ``features=False`` leaves ``x`` out (an empty [0, d] tensor): for callers that gather
        per-node features of the original batch through ``origin`` instead of copying them.
        """
        index = index.to(self.batch_num_nodes.device, torch.int64)
        node_ptr = self.node_offsets
        edge_ptr = _exclusive_cumsum(self.batch_num_edges)
        new_nodes = self.batch_num_nodes[index]
        new_edges = self.batch_num_edges[index]
        node_take = _concat_ranges(node_ptr[index], new_nodes)
        edge_take = _concat_ranges(edge_ptr[index], new_edges)
        # An edge of old graph g copied into new graph k moves by (new offset of k - old offset of g).
        graph_shift = _exclusive_cumsum(new_nodes) - node_ptr[index]
        shift = graph_shift.repeat_interleave(new_edges, output_size=edge_take.numel())
        graph_index = torch.arange(index.numel(), device=index.device).repeat_interleave(new_nodes, output_size=node_take.numel())
        selected = SubgraphBatch(
            src=self.src[edge_take] + shift, dst=self.dst[edge_take] + shift, rel=self.rel[edge_take],
            num_nodes=int(node_take.numel()), graph_index=graph_index, x=self.x[node_take] if features else self.x[:0],
            query=self.query[index], hop=self.hop[node_take], score=self.score[node_take],
            labels=self.labels[node_take], num_answers=self.num_answers[index], node_ids=self.node_ids[node_take],
            batch_num_nodes=new_nodes, batch_num_edges=new_edges,
            node_type=None if self.node_type is None else self.node_type[node_take],
            relation_scores=None if self.relation_scores is None else self.relation_scores[index],
            direction=None if self.direction is None else self.direction[edge_take],
            origin=node_take if self.origin is None else self.origin[node_take],
        )
        if "frontier_order" in self.__dict__:
            # Graph k's nodes in this batch's frontier order are graph index[k]'s in the source
            # batch's, moved by the same shift as its nodes: no sort for the replicated batch.
            node_shift = graph_shift.repeat_interleave(new_nodes, output_size=node_take.numel())
            selected.__dict__["frontier_order"] = self.frontier_order[node_take] + node_shift
        return selected

    def replicate(self, times: int, features: bool = True) -> "SubgraphBatch":
        """Each graph ``times`` times, query-major: graph ``b * times + m`` is copy ``m`` of graph ``b``.

        This is how M trajectories per query share one forward pass per step.
        """
        index = torch.arange(self.num_graphs, device=self.batch_num_nodes.device).repeat_interleave(times)
        return self.select_graphs(index, features)

    def induced(self, mask: Tensor) -> GraphView:
        """The subgraph induced by the nodes of ``mask`` [n] (edges with both endpoints inside)."""
        nodes = torch.nonzero(mask, as_tuple=False).squeeze(1)
        remap = torch.full((self.num_nodes,), -1, dtype=torch.int64, device=mask.device)
        remap[nodes] = torch.arange(nodes.numel(), device=mask.device)
        # The kept edges' positions once, then index_select: three boolean-mask reads would find
        # them three times (a mask index is a nonzero plus a gather).
        keep = torch.nonzero(mask[self.src] & mask[self.dst], as_tuple=False).squeeze(1)
        return GraphView(nodes=nodes, src=remap.index_select(0, self.src.index_select(0, keep)),
                         dst=remap.index_select(0, self.dst.index_select(0, keep)),
                         rel=self.rel.index_select(0, keep), num_nodes=int(nodes.numel()),
                         direction=None if self.direction is None else self.direction.index_select(0, keep))


def collate(records: list[QuerySubgraph], node_features: np.ndarray, query_features: np.ndarray,
            dtype: torch.dtype = torch.float32, node_types=None) -> SubgraphBatch:
    """Stack query subgraphs into one ``SubgraphBatch``.

    ``node_features`` is the dataset's [N, d] embedding matrix (a memmap works: only the rows of
    the batch are read); ``query_features`` is [B, d], row b for ``records[b]``; ``node_types``
    (optional) is indexed like ``node_features`` and gives each node's type id.
    """
    if len(records) != len(query_features):
        raise ValueError(f"{len(records)} records but {len(query_features)} query feature rows")
    num_nodes = np.asarray([r.num_nodes for r in records], dtype=np.int64)
    num_edges = np.asarray([r.src.shape[0] for r in records], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(num_nodes)[:-1]]).astype(np.int64)

    def cat(arrays, np_dtype):
        return np.concatenate(arrays).astype(np_dtype, copy=False) if arrays else np.zeros(0, np_dtype)

    labels = []
    for r in records:
        if r.labels.shape[0] not in (0, r.num_nodes):
            raise ValueError(f"query {r.query_id}: {r.labels.shape[0]} labels for {r.num_nodes} nodes")
        labels.append(r.labels.astype(bool) if r.labels.shape[0] == r.num_nodes else np.zeros(r.num_nodes, bool))
    node_ids = cat([r.node_ids for r in records], np.int64)
    relation_scores = stack_relation_scores(records)
    x = np.asarray(node_features[node_ids], dtype=np.float32)  # fancy indexing reads only these rows
    return SubgraphBatch(
        src=torch.from_numpy(cat([r.src + o for r, o in zip(records, offsets)], np.int64)),
        dst=torch.from_numpy(cat([r.dst + o for r, o in zip(records, offsets)], np.int64)),
        rel=torch.from_numpy(cat([r.rel for r in records], np.int64)),
        num_nodes=int(num_nodes.sum()),
        graph_index=torch.from_numpy(np.repeat(np.arange(len(records), dtype=np.int64), num_nodes)),
        x=torch.from_numpy(x).to(dtype),
        query=torch.from_numpy(np.asarray(query_features, dtype=np.float32)).to(dtype),
        hop=torch.from_numpy(cat([r.hop for r in records], np.int64)),
        score=torch.from_numpy(cat([r.score for r in records], np.float32)).to(dtype),
        labels=torch.from_numpy(cat(labels, bool)),
        num_answers=torch.as_tensor([r.num_answers for r in records], dtype=torch.int64),
        node_ids=torch.from_numpy(node_ids),
        batch_num_nodes=torch.from_numpy(num_nodes),
        batch_num_edges=torch.from_numpy(num_edges),
        node_type=None if node_types is None else torch.from_numpy(np.asarray(node_types[node_ids], dtype=np.int64)),
        relation_scores=None if relation_scores is None else torch.from_numpy(relation_scores).to(dtype),
        direction=torch.from_numpy(cat([r.direction if r.direction.shape[0] == r.src.shape[0]
                                        else np.zeros(r.src.shape[0], np.int8) for r in records], np.int64)),
    )


def fit_pca(matrix: np.ndarray, dim: int, chunk_rows: int = 65536) -> tuple[np.ndarray, np.ndarray]:
    """PCA of the rows of ``matrix`` [N, d]: returns ``(mean [d], components [dim, d])`` (float32).

    Eigen-decomposition of the float64 covariance, accumulated in chunks so a large memmap is
    never copied whole. Deterministic: each component's sign is fixed so its largest-magnitude
    coordinate is positive (the same convention as scikit-learn's ``svd_flip``).
    """
    n, d = matrix.shape
    if not 0 < dim <= d:
        raise ValueError(f"PCA dimension {dim} must be in 1..{d}")
    total = np.zeros(d, np.float64)
    for start in range(0, n, chunk_rows):
        total += np.asarray(matrix[start:start + chunk_rows], np.float64).sum(0)
    mean = total / n
    cov = np.zeros((d, d), np.float64)
    for start in range(0, n, chunk_rows):
        block = np.asarray(matrix[start:start + chunk_rows], np.float64) - mean
        cov += block.T @ block
    eigval, eigvec = np.linalg.eigh(cov / max(n - 1, 1))
    components = eigvec[:, np.argsort(eigval)[::-1][:dim]].T  # [dim, d], largest variance first
    signs = np.sign(components[np.arange(dim), np.abs(components).argmax(1)])
    components *= np.where(signs == 0, 1.0, signs)[:, None]
    return mean.astype(np.float32), components.astype(np.float32)


def apply_pca(x: np.ndarray, mean: np.ndarray | None, components: np.ndarray | None,
              normalize: bool = True) -> np.ndarray:
    """Project rows of ``x`` onto the PCA components (skipped when None), then L2-normalise."""
    out = np.asarray(x, np.float32)
    if components is not None:
        out = (out - mean) @ components.T
    if normalize:
        out = out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
    return out.astype(np.float32, copy=False)
