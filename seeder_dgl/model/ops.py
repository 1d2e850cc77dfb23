"""The message-passing primitives of the sparse graph transformer, behind one interface.

Two implementations compute the same thing:

* ``DGLOps``: idiomatic DGL (``apply_edges`` for scores, ``edge_softmax``, ``update_all`` with
  built-in message/reduce functions) inside ``graph.local_scope()``. DGL is imported here,
  lazily, and nowhere else in the model: PyPI's DGL 2.1 is CPU-only and pins torch 2.2.
* ``TorchOps``: gathers over ``src, dst`` index tensors, sums into nodes by ``index_add`` or CSR
  products, the attention's gradient written by hand. Runs wherever torch runs (any version, CPU
  or CUDA) and is what a GPU machine without DGL uses, and what training with several processes
  uses.

Both take a ``GraphView`` through ``prepare`` and return a backend handle, then
``attend(handle, q, k, v, ek, ev)`` for every layer. Shapes: node tensors [n, H, d_h], edge
tensors [m, H, d_h]; edge j→i has ``src = j``, ``dst = i`` and attention normalises over the
incoming edges of each ``i``. A node without incoming edges receives zeros. The encoder calls
``attend_packed`` instead, with Q, K and V side by side in one [n, 3·H·d_h] tensor and the edge
features as rows of a per-relation table: the torch path then gathers each node row once and
writes each gradient into one buffer (``SparseAttention``).
"""
from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import Any, Protocol

import torch
from torch import Tensor

from seeder_dgl.model.batch import GraphView, stable_argsort


class MessagePassingOps(Protocol):
    name: str

    def prepare(self, view: GraphView) -> Any:
        """The backend's graph handle for ``view`` (built once, used by every layer)."""

    def edge_softmax(self, graph: Any, scores: Tensor) -> Tensor:
        """Softmax of edge ``scores`` [m, ...] over the incoming edges of each destination node."""

    def attend(self, graph: Any, q: Tensor, k: Tensor, v: Tensor, ek: Tensor, ev: Tensor) -> Tensor:
        """``h̄_i = Σ_j α_ij (V_j + E^V_ij)``, ``α = softmax_j(Q_i·(K_j ⊙ E^K_ij)/√d_h)``: [n, H, d_h]."""

    def attend_packed(self, graph: Any, qkv: Tensor, edge_table: Tensor, rel: Tensor, heads: int) -> Tensor:
        """``attend`` with ``qkv`` = [Q ‖ K ‖ V] [n, 3·H·d_h] and edge j→i's [E^K ‖ E^V] the row
        ``rel[e]`` of ``edge_table`` [T, 2·H·d_h]: [n, H·d_h]."""


def scatter_softmax(scores: Tensor, index: Tensor, num_segments: int) -> Tensor:
    """Softmax of ``scores`` [m, ...] within groups of equal ``index`` [m] (max-subtracted per group)."""
    shape = (num_segments,) + tuple(scores.shape[1:])
    expanded = index.view(-1, *([1] * (scores.dim() - 1))).expand_as(scores)
    # The shift only keeps exp() finite; softmax is invariant to it, so no gradient is needed.
    group_max = scores.new_full(shape, -math.inf).scatter_reduce(0, expanded, scores.detach(), reduce="amax")
    numer = torch.exp(scores - group_max.index_select(0, index))
    denom = scores.new_zeros(shape).index_add(0, index, numer)
    return numer / denom.index_select(0, index)


SOFTMAX_SHARED_SHIFT_SPAN = 60.0
"""``SparseAttention`` shifts all scores by their overall maximum when they span less than this
(exp(−60) ≈ 1e−26 is far from float32's smallest normal number, 1e−38), by each destination's
maximum otherwise. Either way the softmax is the same up to rounding."""


CSR_MIN_EDGES = 2048
"""Views with at least this many edges sum edge rows into nodes by CSR products; smaller ones
(a live query's) by ``index_add``, where building the two CSR layouts would cost more than it saves."""


class TorchGraph:
    """The pure-torch graph handle: edge index tensors, and ``edge_sum``: the sum of edge rows into
    their destination (or source) nodes. On a view of ``CSR_MIN_EDGES`` edges or more it is a
    product by a sparse [n, m] 0/1 matrix in CSR form, built once and used by every layer's forward
    and backward: on the training views of MetaQA it sums 16-wide rows about three times faster
    on the CPU than ``index_add``, which scatters element by element."""

    def __init__(self, src: Tensor, dst: Tensor, num_nodes: int):
        self.src, self.dst, self.num_nodes = src, dst, num_nodes
        self.sparse = src.numel() >= CSR_MIN_EDGES
        self._matrices: dict[tuple[str, torch.dtype], Tensor] = {}

    def edge_sum(self, by: str, values: Tensor) -> Tensor:
        """[n, ...]: row i sums the rows e of ``values`` [m, ...] whose edge's ``by`` ('dst' or 'src') is i."""
        if not self.sparse:
            index = self.dst if by == "dst" else self.src
            return values.new_zeros((self.num_nodes,) + tuple(values.shape[1:])).index_add_(0, index, values)
        key = (by, values.dtype)
        if key not in self._matrices:
            crow, col = _csr_layout(self.dst if by == "dst" else self.src, self.num_nodes)
            ones = torch.ones(col.numel(), dtype=values.dtype, device=col.device)
            with warnings.catch_warnings():  # "sparse CSR support is in beta": products by dense matrices are all we use
                warnings.simplefilter("ignore", UserWarning)
                self._matrices[key] = torch.sparse_csr_tensor(crow, col, ones, size=(self.num_nodes, col.numel()))
        return self._matrices[key] @ values


def _csr_layout(index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """Row pointers [n + 1] and column (edge) indices [m] of the [n, m] matrix grouping edges by ``index``."""
    crow = torch.zeros(num_nodes + 1, dtype=torch.int64, device=index.device)
    if index.numel():
        crow[1:] = torch.cumsum(torch.bincount(index, minlength=num_nodes), 0)
    return crow, stable_argsort(index)


def reference_attention(graph: TorchGraph, q: Tensor, k: Tensor, v: Tensor, ek: Tensor, ev: Tensor) -> Tensor:
    """``MessagePassingOps.attend`` written plainly with autograd: what ``SparseAttention`` computes."""
    src, dst = graph.src, graph.dst
    q_dst, k_src, v_src = q.index_select(0, dst), k.index_select(0, src), v.index_select(0, src)
    scores = (q_dst * (k_src * ek)).sum(-1, keepdim=True) / math.sqrt(q.shape[-1])  # [m, H, 1]
    alpha = scatter_softmax(scores, dst, graph.num_nodes)
    messages = alpha * (v_src + ev)
    return q.new_zeros((graph.num_nodes,) + tuple(v.shape[1:])).index_add(0, dst, messages)


@lru_cache(maxsize=16)
def _head_matrices(heads: int, head_dim: int, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """ones [d_h] (per-head sums as one matrix-vector product) and the 0/1 [H, H·d_h] matrix that
    spreads one value per head over the head's columns."""
    ones = torch.ones(head_dim, dtype=dtype, device=device)
    return ones, torch.eye(heads, dtype=dtype, device=device).repeat_interleave(head_dim, dim=1)


class SparseAttention(torch.autograd.Function):
    """``reference_attention`` on packed inputs as one autograd node with its gradient written out.

    Why: the heads are 4 wide, and on the CPU torch's reductions and broadcasts over a last
    dimension that small run several times slower than the same work on 16-wide rows, while
    autograd adds a node, a saved tensor and often a copy per elementwise step. Here the
    per-head dot products are one matrix-vector product over [m·H, d_h] rows, a per-head value
    is spread over its d_h columns by a product with a 0/1 [H, H·d_h] matrix, every edge tensor
    is a plain [m, H·d_h] matrix, and sums over edges into nodes are CSR products on large views
    (``TorchGraph.edge_sum``).

    Inputs: ``qkv`` [n, 3·D] (D = H·d_h), ``table`` [T, 2·D] (edge j→i reads row ``rel[e]``:
    [E^K ‖ E^V]), ``rel`` [m], the ``TorchGraph``, ``heads``. Output [n, D].
    """

    @staticmethod
    def forward(ctx, qkv: Tensor, table: Tensor, rel: Tensor, graph: TorchGraph, heads: int) -> Tensor:
        width = qkv.shape[1] // 3
        head_dim = width // heads
        scale = 1.0 / math.sqrt(head_dim)
        ones, spread = _head_matrices(heads, head_dim, qkv.dtype, qkv.device)
        # Every edge tensor is gathered into its own contiguous [m, D] matrix: elementwise kernels
        # over strided halves of wider rows run several times slower.
        q_dst = qkv[:, :width].index_select(0, graph.dst)
        k_src = qkv[:, width:2 * width].index_select(0, graph.src)
        v_src = qkv[:, 2 * width:].index_select(0, graph.src)
        e_k = table[:, :width].index_select(0, rel)
        e_v = table[:, width:].index_select(0, rel)
        ke = k_src * e_k
        scores = ((q_dst * ke).view(-1, head_dim) @ ones).view(-1, heads).mul_(scale)  # [m, H]
        # Softmax over each destination's incoming edges. Any shift shared by a destination's
        # edges cancels out; it only has to keep exp() finite and not round every one of them to
        # zero. The largest score of all edges does both while the scores span less than
        # SOFTMAX_SHARED_SHIFT_SPAN (the case in practice), without a per-destination maximum.
        alpha = None
        if scores.device.type == "cpu" and scores.numel():
            low, high = torch.aminmax(scores)
            if float(high - low) < SOFTMAX_SHARED_SHIFT_SPAN:
                alpha = torch.exp_(scores - high)
        if alpha is None:
            index = graph.dst.unsqueeze(1).expand(-1, heads)
            top = scores.new_full((graph.num_nodes, heads), -math.inf).scatter_reduce_(0, index, scores, "amax")
            alpha = torch.exp_(scores - top.index_select(0, graph.dst))
        alpha = alpha.div_(graph.edge_sum("dst", alpha).index_select(0, graph.dst))
        alpha_wide = alpha @ spread                             # [m, D]
        values = v_src.add_(e_v)                                # V_j + E^V_ij
        out = graph.edge_sum("dst", values * alpha_wide)
        ctx.save_for_backward(q_dst, k_src, e_k, ke, values, alpha, alpha_wide, rel)
        ctx.graph, ctx.shape = graph, (table.shape[0], heads, head_dim, scale)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        q_dst, k_src, e_k, ke, values, alpha, alpha_wide, rel = ctx.saved_tensors
        graph = ctx.graph
        table_rows, heads, head_dim, scale = ctx.shape
        ones, spread = _head_matrices(heads, head_dim, grad.dtype, grad.device)
        g = grad.contiguous().index_select(0, graph.dst)  # [m, D]: dL/d(message of edge e)
        d_alpha = ((g * values).view(-1, head_dim) @ ones).view(-1, heads)
        # Softmax backward within each destination: α ⊙ (dα − Σ_incoming α dα), times the scale.
        t = alpha * d_alpha
        d_scores = ((t - alpha * graph.edge_sum("dst", t).index_select(0, graph.dst)) * scale) @ spread  # [m, D]
        d_values = g.mul_(alpha_wide)                       # dL/d(V_j + E^V_ij): V and E^V share it
        d_ke = q_dst * d_scores                             # dL/d(K_j ⊙ E^K_ij)
        d_kv = graph.edge_sum("src", torch.cat([d_ke * e_k, d_values], dim=1))
        d_qkv = torch.cat([graph.edge_sum("dst", ke * d_scores), d_kv], dim=1)
        d_table = None
        if ctx.needs_input_grad[1]:
            d_edge = torch.cat([d_ke.mul_(k_src), d_values], dim=1)
            d_table = grad.new_zeros((table_rows, d_edge.shape[1])).index_add_(0, rel, d_edge)
        return d_qkv, d_table, None, None, None


class TorchOps:
    """Pure-torch message passing: gathers on ``src``/``dst``, sums into nodes by ``index_add`` or
    CSR products (``TorchGraph``), the attention as one autograd function (``SparseAttention``)."""

    name = "torch"

    def prepare(self, view: GraphView) -> TorchGraph:
        return TorchGraph(view.src, view.dst, view.num_nodes)

    def edge_softmax(self, graph: TorchGraph, scores: Tensor) -> Tensor:
        return scatter_softmax(scores, graph.dst, graph.num_nodes)

    def attend(self, graph: TorchGraph, q: Tensor, k: Tensor, v: Tensor, ek: Tensor, ev: Tensor) -> Tensor:
        n, m, heads = q.shape[0], ek.shape[0], q.shape[1]
        width = heads * q.shape[2]
        qkv = torch.cat([q.reshape(n, width), k.reshape(n, width), v.reshape(n, width)], dim=1)
        table = torch.cat([ek.reshape(m, width), ev.reshape(m, width)], dim=1)  # one row per edge
        rel = torch.arange(m, device=q.device)
        return self.attend_packed(graph, qkv, table, rel, heads).view(q.shape)

    def attend_packed(self, graph: TorchGraph, qkv: Tensor, edge_table: Tensor, rel: Tensor, heads: int) -> Tensor:
        return SparseAttention.apply(qkv, edge_table.contiguous(), rel, graph, heads)


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

    def attend_packed(self, graph, qkv: Tensor, edge_table: Tensor, rel: Tensor, heads: int) -> Tensor:
        n = qkv.shape[0]
        q, k, v = (part.reshape(n, heads, -1) for part in qkv.chunk(3, dim=-1))
        ek, ev = edge_table.index_select(0, rel).view(rel.shape[0], 2, heads, -1).unbind(1)
        return self.attend(graph, q, k, v, ek, ev).reshape(n, -1)


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
