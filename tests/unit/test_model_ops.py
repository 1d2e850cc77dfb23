"""The model's graph layout and message-passing ops: DGL and pure torch must agree exactly."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from seeder_dgl.model import (DGLOps, SeederPolicy, SubgraphBatch, TorchOps, apply_pca, collate, dgl_available,
                              fit_pca, scatter_softmax, select_ops)
from seeder_dgl.model.batch import stable_argsort
from seeder_dgl.model.ops import SparseAttention, TorchGraph, reference_attention
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training import TrainConfig

REPO = Path(__file__).resolve().parents[2]
needs_dgl = pytest.mark.dgl  # run in the DGL lane (`make test-dgl`); deselected where DGL is absent


def random_record(rng: np.random.Generator, query_id: int, n: int, num_global: int = 1000, k0: int = 3,
                  num_relations: int = 5, extra_edges: int | None = None, answer_rate: float = 0.1) -> QuerySubgraph:
    """A connected random subgraph shaped like K-hop output: seeds first, every edge in both directions."""
    parent = np.array([rng.integers(0, max(i, 1)) for i in range(k0, n)], dtype=np.int64)
    extra = n if extra_edges is None else extra_edges
    src = np.concatenate([np.arange(k0, n), rng.integers(0, n, extra)])
    dst = np.concatenate([parent, rng.integers(0, n, extra)])
    rel = rng.integers(0, num_relations, src.size)
    hop = np.zeros(n, np.int8)
    hop[k0:] = rng.integers(1, 3, n - k0)
    labels = rng.random(n) < answer_rate
    return QuerySubgraph(query_id=query_id, node_ids=rng.choice(num_global, n, replace=False), hop=hop,
                         score=rng.random(n).astype(np.float32), src=np.concatenate([src, dst]),
                         dst=np.concatenate([dst, src]), rel=np.concatenate([rel, rel]), labels=labels,
                         num_answers=int(labels.sum()) + 1)


def random_batch(seed: int = 0, sizes=(12, 30, 7), dim: int = 8, dtype=torch.float64) -> SubgraphBatch:
    rng = np.random.default_rng(seed)
    records = [random_record(rng, i, n) for i, n in enumerate(sizes)]
    return collate(records, rng.normal(size=(1000, dim)), rng.normal(size=(len(sizes), dim)), dtype=dtype)


def test_collate_offsets_and_replicate():
    rng = np.random.default_rng(1)
    records = [random_record(rng, i, n) for i, n in enumerate((5, 9, 4))]
    feats = rng.normal(size=(1000, 4)).astype(np.float32)
    batch = collate(records, feats, rng.normal(size=(3, 4)))
    assert batch.num_nodes == 18 and batch.num_graphs == 3
    assert batch.graph_index.tolist() == [0] * 5 + [1] * 9 + [2] * 4
    assert batch.batch_num_edges.tolist() == [r.src.size for r in records]
    # Each edge joins the same global nodes as in its record, and stays inside its graph.
    for b, r in enumerate(records):
        lo = int(batch.batch_num_edges[:b].sum())
        hi = lo + r.src.size
        assert np.array_equal(batch.node_ids[batch.src[lo:hi]].numpy(), r.node_ids[r.src])
        assert np.array_equal(batch.node_ids[batch.dst[lo:hi]].numpy(), r.node_ids[r.dst])
    assert torch.equal(batch.graph_index[batch.src], batch.graph_index[batch.dst])
    np.testing.assert_array_equal(batch.x.numpy(), feats[np.concatenate([r.node_ids for r in records])])

    rep = batch.replicate(3)
    assert rep.num_graphs == 9 and rep.num_nodes == 54
    assert rep.batch_num_nodes.tolist() == [5, 5, 5, 9, 9, 9, 4, 4, 4]
    assert torch.equal(rep.graph_index[rep.src], rep.graph_index[rep.dst])
    for g in range(9):
        b = g // 3
        mine = rep.graph_index == g
        assert torch.equal(rep.node_ids[mine], batch.node_ids[batch.graph_index == b])
        edges = rep.graph_index[rep.src] == g
        orig = batch.graph_index[batch.src] == b
        assert torch.equal(rep.node_ids[rep.src[edges]], batch.node_ids[batch.src[orig]])
        assert torch.equal(rep.rel[edges], batch.rel[orig])
    assert torch.equal(rep.num_answers, batch.num_answers.repeat_interleave(3))


def test_stable_argsort_matches_torch_stable_sort():
    gen = torch.Generator().manual_seed(0)
    for high in (1, 7, 300, 65_535, 65_536, 2 ** 40):  # 16-bit radix path, then torch's sort
        values = torch.randint(0, high, (5_000,), generator=gen)
        assert torch.equal(stable_argsort(values), torch.sort(values, stable=True).indices)
    assert stable_argsort(torch.zeros(0, dtype=torch.int64)).numel() == 0
    negative = torch.tensor([3, -1, 3, 0])
    assert torch.equal(stable_argsort(negative), torch.sort(negative, stable=True).indices)


@pytest.mark.parametrize("index", [[0, 0, 0, 1, 1, 1, 2, 2, 2], [2, 0, 0, 1]])
def test_selected_graphs_inherit_the_frontier_order(index):
    """A batch made from one whose frontier order is known takes it over (no sort): it must be the
    order a sort of its own scores gives, ties included."""
    batch = random_batch(3, sizes=(12, 30, 7), dtype=torch.float32)
    batch.score[::3] = 0.5  # ties: broken by node index
    source_order = batch.frontier_order
    made = batch.select_graphs(torch.tensor(index), features=False)
    inherited = made.__dict__.pop("frontier_order")
    assert torch.equal(inherited, made.frontier_order)
    assert torch.equal(batch.frontier_order, source_order)
    untouched = random_batch(3, sizes=(12, 30, 7), dtype=torch.float32).select_graphs(torch.tensor(index))
    assert "frontier_order" not in untouched.__dict__


def test_induced_subgraph_keeps_edges_with_both_ends_inside():
    batch = random_batch(2, dtype=torch.float32)
    mask = torch.rand(batch.num_nodes, generator=torch.Generator().manual_seed(0)) < 0.5
    view = batch.induced(mask)
    assert torch.equal(view.nodes, torch.nonzero(mask).squeeze(1))
    expected = {(int(s), int(d), int(r)) for s, d, r in zip(batch.src, batch.dst, batch.rel) if mask[s] and mask[d]}
    got = {(int(view.nodes[s]), int(view.nodes[d]), int(r)) for s, d, r in zip(view.src, view.dst, view.rel)}
    assert got == expected and len(view.src) == int((mask[batch.src] & mask[batch.dst]).sum())


def test_scatter_softmax_sums_to_one_per_destination():
    gen = torch.Generator().manual_seed(0)
    dst = torch.randint(0, 10, (60,), generator=gen)  # several of the 12 nodes receive nothing
    scores = torch.randn(60, 3, generator=gen, dtype=torch.float64) * 30  # large values: needs the max shift
    alpha = scatter_softmax(scores, dst, 12)
    sums = torch.zeros(12, 3, dtype=torch.float64).index_add(0, dst, alpha)
    has_in = torch.bincount(dst, minlength=12) > 0
    torch.testing.assert_close(sums[has_in], torch.ones_like(sums[has_in]))
    assert torch.all(sums[~has_in] == 0) and torch.isfinite(alpha).all()
    for i in dst.unique():
        torch.testing.assert_close(alpha[dst == i], torch.softmax(scores[dst == i], dim=0))


def _random_attention_inputs(view, heads=2, head_dim=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n, m = view.num_nodes, view.src.numel()
    shapes = [(n, heads, head_dim)] * 3 + [(m, heads, head_dim)] * 2
    return [torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes]


def _packed_inputs(view, num_rows: int, heads=2, head_dim=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    width = heads * head_dim
    qkv = torch.randn(view.num_nodes, 3 * width, generator=gen, dtype=torch.float64).requires_grad_()
    table = torch.randn(num_rows, 2 * width, generator=gen, dtype=torch.float64).requires_grad_()
    rel = torch.randint(0, num_rows, (view.src.numel(),), generator=gen)
    return qkv, table, rel


def _unpacked(qkv, table, rel, heads):
    n, m = qkv.shape[0], rel.numel()
    q, k, v = (part.reshape(n, heads, -1) for part in qkv.chunk(3, dim=1))
    ek, ev = table.index_select(0, rel).view(m, 2, heads, -1).unbind(1)
    return q, k, v, ek, ev


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_packed_attention_equals_the_autograd_formula_with_gradients(seed, sparse, monkeypatch):
    """``SparseAttention`` (the torch path's attention, gradient written by hand) against the plain
    autograd formula: outputs and the gradients of Q/K/V and of the shared relation table, with the
    edge sums as CSR products (large views) and as ``index_add`` (small ones)."""
    import seeder_dgl.model.ops as ops_module

    monkeypatch.setattr(ops_module, "CSR_MIN_EDGES", 0 if sparse else 10 ** 9)
    batch = random_batch(seed, sizes=(15, 40, 6, 22))
    mask = torch.rand(batch.num_nodes, generator=torch.Generator().manual_seed(seed)) < 0.6
    view = batch.induced(mask)
    in_degree = torch.bincount(view.dst, minlength=view.num_nodes)
    assert (in_degree == 0).any() and view.src.numel() > 20
    graph = TorchOps().prepare(view)
    assert graph.sparse == sparse
    qkv, table, rel = _packed_inputs(view, num_rows=4, seed=seed)  # 4 rows: every row read by many edges
    weights = torch.randn(view.num_nodes, 6, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    out = TorchOps().attend_packed(graph, qkv, table, rel, heads=2)
    fast_grads = torch.autograd.grad((out * weights).sum(), (qkv, table))
    ref = reference_attention(graph, *_unpacked(qkv, table, rel, 2)).reshape(view.num_nodes, -1)
    ref_grads = torch.autograd.grad((ref * weights).sum(), (qkv, table))
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    for fast, slow in zip(fast_grads, ref_grads):
        torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-10)
    assert torch.all(out[in_degree == 0] == 0)
    # And the hand-written gradient against finite differences.
    small = batch.induced(torch.rand(batch.num_nodes, generator=torch.Generator().manual_seed(seed + 10)) < 0.25)
    small_graph = TorchGraph(small.src, small.dst, small.num_nodes)
    qkv, table, rel = _packed_inputs(small, num_rows=3, seed=seed)
    assert torch.autograd.gradcheck(lambda a, b: SparseAttention.apply(a, b, rel, small_graph, 2), (qkv, table))


def test_packed_attention_softmax_is_shift_safe():
    """Scores in the thousands (exp would overflow unshifted) still give finite, exact weights."""
    batch = random_batch(5, sizes=(20, 20))
    view = batch.induced(torch.ones(batch.num_nodes, dtype=torch.bool))
    graph = TorchOps().prepare(view)
    qkv, table, rel = _packed_inputs(view, num_rows=2, seed=5)
    big = (qkv.detach() * 40).requires_grad_()
    out = TorchOps().attend_packed(graph, big, table, rel, heads=2)
    ref = reference_attention(graph, *_unpacked(big, table, rel, 2)).reshape(view.num_nodes, -1)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("scale", [1.0, 40.0])
def test_packed_attention_shared_and_per_destination_shifts_agree(scale, monkeypatch):
    """The softmax shifted by the largest score of all edges (scores spanning less than
    SOFTMAX_SHARED_SHIFT_SPAN) and by each destination's largest: the same weights and gradients.
    With scores in the thousands only the per-destination shift is safe, and the default picks it."""
    import seeder_dgl.model.ops as ops_module

    batch = random_batch(6, sizes=(25, 18))
    view = batch.induced(torch.ones(batch.num_nodes, dtype=torch.bool))
    graph = TorchOps().prepare(view)
    qkv, table, rel = _packed_inputs(view, num_rows=3, seed=6)
    qkv = (qkv.detach() * scale).requires_grad_()
    weights = torch.randn(view.num_nodes, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    results = {}
    for name, span in (("default", ops_module.SOFTMAX_SHARED_SHIFT_SPAN), ("shared", float("inf")),
                       ("per_destination", 0.0)):
        monkeypatch.setattr(ops_module, "SOFTMAX_SHARED_SHIFT_SPAN", span)
        out = TorchOps().attend_packed(graph, qkv, table, rel, heads=2)
        results[name] = (out, *torch.autograd.grad((out * weights).sum(), (qkv, table)))
    ref = reference_attention(graph, *_unpacked(qkv, table, rel, 2)).reshape(view.num_nodes, -1)
    names = ("default", "shared", "per_destination") if scale == 1.0 else ("default", "per_destination")
    for name in names:
        torch.testing.assert_close(results[name][0], ref, rtol=1e-10, atol=1e-10)
        for got, want in zip(results[name], results["per_destination"]):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    if scale > 1:  # one shift for all edges would round whole destinations to 0 / 0 here
        assert not torch.isfinite(results["shared"][0]).all()


@needs_dgl
def test_dgl_packed_attention_agrees_with_torch():
    batch = random_batch(6, sizes=(25, 18, 9))
    view = batch.induced(torch.rand(batch.num_nodes, generator=torch.Generator().manual_seed(6)) < 0.7)
    results = {}
    for ops in (TorchOps(), DGLOps()):
        qkv, table, rel = _packed_inputs(view, num_rows=5, seed=6)
        out = ops.attend_packed(ops.prepare(view), qkv, table, rel, heads=2)
        results[ops.name] = (out.detach(), torch.autograd.grad(out.square().sum(), (qkv, table)))
    (out_t, grads_t), (out_d, grads_d) = results["torch"], results["dgl"]
    torch.testing.assert_close(out_t, out_d, rtol=1e-10, atol=1e-10)
    for gt, gd in zip(grads_t, grads_d):
        torch.testing.assert_close(gt, gd, rtol=1e-10, atol=1e-10)


@needs_dgl
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dgl_and_torch_attention_agree_with_gradients(seed):
    batch = random_batch(seed, sizes=(15, 40, 6, 22))
    # A random induced view: dangling nodes and nodes without incoming edges are frequent.
    mask = torch.rand(batch.num_nodes, generator=torch.Generator().manual_seed(seed)) < 0.6
    view = batch.induced(mask)
    in_degree = torch.bincount(view.dst, minlength=view.num_nodes)
    assert (in_degree == 0).any(), "the case of nodes without incoming edges must be covered"
    results = {}
    for ops in (TorchOps(), DGLOps()):
        inputs = _random_attention_inputs(view, seed=seed)
        graph = ops.prepare(view)
        out = ops.attend(graph, *inputs)
        weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(99), dtype=torch.float64)
        (out * weights).sum().backward()
        soft = ops.edge_softmax(graph, inputs[3].detach().sum(-1))
        results[ops.name] = (out.detach(), [t.grad for t in inputs], soft)
    (out_t, grads_t, soft_t), (out_d, grads_d, soft_d) = results["torch"], results["dgl"]
    torch.testing.assert_close(out_t, out_d, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(soft_t, soft_d, rtol=1e-10, atol=1e-10)
    for gt, gd in zip(grads_t, grads_d):
        torch.testing.assert_close(gt, gd, rtol=1e-10, atol=1e-10)
    assert torch.all(out_t[in_degree == 0] == 0)


@needs_dgl
def test_ops_handle_graphs_without_edges():
    batch = random_batch(3, sizes=(5, 5))
    no_self_loop = batch.src != batch.dst  # the random graphs may have self-loops; drop them here
    batch.src, batch.dst, batch.rel = batch.src[no_self_loop], batch.dst[no_self_loop], batch.rel[no_self_loop]
    mask = torch.zeros(batch.num_nodes, dtype=torch.bool)
    mask[[0, 7]] = True  # two nodes of different graphs: no edge between them
    view = batch.induced(mask)
    assert view.src.numel() == 0
    for ops in (TorchOps(), DGLOps()):
        out = ops.attend(ops.prepare(view), *_random_attention_inputs(view))
        assert out.shape == (2, 2, 3) and torch.all(out == 0)


@needs_dgl
def test_encoder_and_heads_agree_across_ops():
    batch = random_batch(4, sizes=(20, 35, 9))
    results = {}
    for ops in (TorchOps(), DGLOps()):
        torch.manual_seed(0)
        policy = SeederPolicy(in_dim=8, num_relations=5, hidden_dim=16, num_layers=2, heads=4).double().eval()
        selected = batch.seed_mask.clone()
        expansion = policy.expand(batch, selected, step=0, ops=ops)
        selected[expansion.frontier.nodes] = True
        scored = policy.score(batch, selected, ops=ops)
        (expansion.logits.sum() + scored.scores.square().sum()).backward()
        results[ops.name] = (expansion.logits.detach(), scored.scores.detach(),
                             {k: p.grad.clone() for k, p in policy.named_parameters()})
    (lt, st, gt), (ld, sd, gd) = results["torch"], results["dgl"]
    torch.testing.assert_close(lt, ld, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(st, sd, rtol=1e-9, atol=1e-9)
    assert gt.keys() == gd.keys()
    for name in gt:
        torch.testing.assert_close(gt[name], gd[name], rtol=1e-8, atol=1e-9, msg=name)


def test_select_ops():
    assert isinstance(select_ops("cpu", "torch"), TorchOps)
    if dgl_available("cpu"):
        assert isinstance(select_ops("cpu"), DGLOps) and isinstance(select_ops("cpu", "dgl"), DGLOps)
    if not dgl_available("cuda"):  # PyPI DGL 2.1 is CPU-only: CUDA tensors go through torch
        assert isinstance(select_ops("cuda"), TorchOps)
        with pytest.raises(RuntimeError):
            select_ops("cuda", "dgl")
    with pytest.raises(ValueError):
        select_ops("cpu", "tensorflow")


def test_model_runs_without_dgl():
    """The whole model imports and runs with DGL made unimportable (the GPU-without-DGL machine)."""
    code = """
import sys
sys.modules['dgl'] = None  # any 'import dgl' now raises ImportError
import numpy as np, torch
import seeder_dgl.model, seeder_dgl.training
from seeder_dgl.model import SeederPolicy, TorchOps, collate, select_ops
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.training import TrainConfig, training_objective
assert isinstance(select_ops('cpu'), TorchOps)
rng = np.random.default_rng(0)
n = 30
src = np.concatenate([np.arange(1, n), rng.integers(0, n, 20)]); dst = np.concatenate([np.zeros(n - 1, int), rng.integers(0, n, 20)])
hop = np.ones(n, np.int8); hop[:3] = 0
rec = QuerySubgraph(0, np.arange(n), hop, rng.random(n).astype(np.float32), np.concatenate([src, dst]),
                    np.concatenate([dst, src]), np.zeros(2 * src.size, np.int64), rng.random(n) < 0.2, 5)
batch = collate([rec, rec], rng.normal(size=(n, 8)), rng.normal(size=(2, 8)))
cfg = TrainConfig(num_trajectories=3)
policy = SeederPolicy.from_config(cfg, in_dim=8, num_relations=1)
objective = training_objective(policy, batch, cfg)
objective.loss.backward()
print('ok', objective.reward.shape)
"""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ok torch.Size([2, 3])" in proc.stdout


def test_no_module_imports_dgl_eagerly():
    code = ("import sys; import seeder_dgl.model, seeder_dgl.training, seeder_dgl.model.policy; "
            "print('dgl' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_fit_pca_is_deterministic_and_spans_the_top_subspace():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 12)) @ rng.normal(size=(12, 12))
    mean, comps = fit_pca(x, 4, chunk_rows=64)  # several chunks
    mean2, comps2 = fit_pca(x.astype(np.float32), 4)
    np.testing.assert_allclose(comps, comps2, atol=1e-4)
    np.testing.assert_allclose(mean, x.mean(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(comps @ comps.T, np.eye(4), atol=1e-5)
    _, _, vt = np.linalg.svd(x - x.mean(0), full_matrices=False)
    # Same subspace as the top-4 right singular vectors (projection matrices agree).
    np.testing.assert_allclose(comps.T @ comps, vt[:4].T @ vt[:4], atol=1e-4)
    out = apply_pca(x[:10], mean, comps)
    assert out.shape == (10, 4) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_parameter_count_prime_defaults():
    cfg = TrainConfig.for_dataset("prime")
    policy = SeederPolicy.from_config(cfg, in_dim=cfg.pca_dim, num_relations=18)
    total = sum(p.numel() for p in policy.parameters())
    parts = {name: sum(p.numel() for p in module.parameters()) for name, module in
             [("node_input", policy.encoder.node_input), ("relations", policy.encoder.relations),
              ("layers", policy.encoder.layers), ("expansion_head", policy.expansion_head),
              ("scoring_head", policy.scoring_head)]}
    print(f"\nSeederPolicy, Prime defaults (PCA 256, hidden 16, 3 layers, 18 relations): {total:,} parameters {parts}")
    assert sum(parts.values()) == total
    assert 50_000 < total < 200_000
