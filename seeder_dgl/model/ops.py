"""The message-passing primitives of the sparse graph transformer, behind one interface.

Two implementations compute the same thing:

* ``DGLOps``: idiomatic DGL (``apply_edges`` for scores, ``edge_softmax``, ``update_all`` with
  built-in message/reduce functions) inside ``graph.local_scope()``. DGL is imported here,
  lazily, and nowhere else in the model: PyPI's DGL 2.1 is CPU-only and pins torch 2.2.
* ``TorchOps``: ``index_add`` / scatter softmax over ``src, dst`` index tensors. Runs wherever
  torch runs (any version, CPU or CUDA) and is what a GPU machine without DGL uses.

Both take a ``GraphView`` through ``prepare`` and return a backend handle, then
``attend(handle, q, k, v, ek, ev)`` for every layer. Shapes: node tensors [n, H, d_h], edge
tensors [m, H, d_h]; edge j→i has ``src = j``, ``dst = i`` and attention normalises over the
incoming edges of each ``i``. A node without incoming edges receives zeros.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

import torch
from torch import Tensor

from seeder_dgl.model.batch import GraphView


class MessagePassingOps(Protocol):
    name: str

    def prepare(self, view: GraphView) -> Any:
        """The backend's graph handle for ``view`` (built once, used by every layer)."""

    def edge_softmax(self, graph: Any, scores: Tensor) -> Tensor:
        """Softmax of edge ``scores`` [m, ...] over the incoming edges of each destination node."""

    def attend(self, graph: Any, q: Tensor, k: Tensor, v: Tensor, ek: Tensor, ev: Tensor) -> Tensor:
        """``h̄_i = Σ_j α_ij (V_j + E^V_ij)``, ``α = softmax_j(Q_i·(K_j ⊙ E^K_ij)/√d_h)``: [n, H, d_h]."""


def scatter_softmax(scores: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """Softmax of ``scores`` [m, ...] within groups of equal ``index`` [m] (max-subtracted per group)."""
    shape = (num_segments,) + tuple(scores.shape[1:])
    expanded = index.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    # The shift only keeps exp() finite; softmax is invariant to it, so no gradient is needed.
    group_max = scores.new_full(shape, -math.inf).scatter_reduce(0, expanded, scores.detach(), reduce="amax")
    numer = torch.exp(scores - group_max.index_select(0, index))
    denom = scores.new_zeros(shape).index_add(0, index, numer)
    return numer / denom.index_select(0, index)


@dataclass(frozen=True)
class TorchGraph:
    src: Tensor
    dst: Tensor
    num_nodes: int


class TorchOps:
    """Pure-torch message passing: gathers on ``src``/``dst`` and ``index_add`` into destinations."""

    name = "torch"

    def prepare(self, view: GraphView) -> TorchGraph:
        return TorchGraph(view.src, view.dst, view.num_nodes)

    def edge_softmax(self, graph: TorchGraph, scores: Tensor) -> Tensor:
        return scatter_softmax(scores, graph.dst, graph.num_nodes)

    def attend(self, graph: TorchGraph, q: Tensor, k: Tensor, v: Tensor, ek: Tensor, ev: Tensor) -> Tensor:
        # index_select rather than q[dst]: its backward is an index_add, where advanced indexing
        # goes through index_put with accumulation (a fifth slower forward and backward, measured).
        src, dst = graph.src, graph.dst
        q_dst, k_src, v_src = q.index_select(0, dst), k.index_select(0, src), v.index_select(0, src)
        scores = (q_dst * (k_src * ek)).sum(-1, keepdim=True) / math.sqrt(q.shape[-1])  # [m, H, 1]
        alpha = scatter_softmax(scores, dst, graph.num_nodes)
        messages = alpha * (v_src + ev)
        return q.new_zeros((graph.num_nodes,) + tuple(v.shape[1:])).index_add(0, dst, messages)


class DGLOps:
    """Message passing with DGL's built-in functions (fused sparse kernels on CPU)."""

    name = "dgl"

    def __init__(self) -> None:
        import dgl  # lazily: the rest of the model never needs DGL
        import dgl.function as fn
        from dgl.ops import edge_softmax

        self._dgl, self._fn, self._edge_softmax = dgl, fn, edge_softmax

    def prepare(self, view: GraphView):
        # The view's node order is the DGL node order; edge i of the view is DGL edge i.
        return self._dgl.graph((view.src, view.dst), num_nodes=view.num_nodes, device=view.src.device)

    def edge_softmax(self, graph, scores: Tensor) -> Tensor:
        return self._edge_softmax(graph, scores)

    def attend(self, graph, q: Tensor, k: Tensor, v: Tensor, ek: Tensor, ev: Tensor) -> Tensor:
        fn = self._fn
        with graph.local_scope():
            graph.ndata["q"], graph.ndata["k"], graph.ndata["v"] = q, k, v
            graph.edata["ek"] = ek
            graph.apply_edges(fn.u_mul_e("k", "ek", "k_e"))     # K_j ⊙ E^K_ij
            graph.apply_edges(fn.v_dot_e("q", "k_e", "score"))  # Q_i · (K_j ⊙ E^K_ij): [m, H, 1]
            alpha = self._edge_softmax(graph, graph.edata["score"] / math.sqrt(q.shape[-1]))
            graph.edata["alpha"] = alpha
            graph.edata["alpha_ev"] = alpha * ev
            # α(V_j + E^V_ij) splits into a node-feature message and an edge-feature message.
            graph.update_all(fn.u_mul_e("v", "alpha", "m"), fn.sum("m", "h_v"))
            graph.update_all(fn.copy_e("alpha_ev", "m"), fn.sum("m", "h_e"))
            return graph.ndata["h_v"] + graph.ndata["h_e"]


@lru_cache(maxsize=None)
def _dgl_supports(device_type: str) -> bool:
    try:
        ops = DGLOps()
    except Exception:  # not installed, or a broken install (wrong torch ABI): use the torch path
        return False
    try:
        device = torch.device(device_type)
        view = GraphView(nodes=torch.arange(2, device=device), src=torch.tensor([0, 1], device=device),
                         dst=torch.tensor([1, 1], device=device), rel=torch.zeros(2, dtype=torch.int64, device=device),
                         num_nodes=2)
        ops.edge_softmax(ops.prepare(view), torch.zeros(2, 1, device=device))
        return True
    except Exception:  # e.g. the CPU-only PyPI DGL asked for a CUDA graph
        return False


def dgl_available(device: torch.device | str = "cpu") -> bool:
    """Whether DGL imports and runs its kernels on ``device``'s type."""
    return _dgl_supports(torch.device(device).type)


def select_ops(device: torch.device | str = "cpu", prefer: str = "auto") -> MessagePassingOps:
    """``'auto'``: DGL where it imports and supports ``device``, else torch. ``'dgl'`` raises if it cannot."""
    if prefer not in ("auto", "dgl", "torch"):
        raise ValueError(f"unknown ops backend {prefer!r}: use 'auto', 'dgl' or 'torch'")
    if prefer == "torch":
        return TorchOps()
    if dgl_available(device):
        return DGLOps()
    if prefer == "dgl":
        raise RuntimeError(f"DGL is not installed or does not support device {device!s} (PyPI DGL 2.1 is CPU-only)")
    return TorchOps()
