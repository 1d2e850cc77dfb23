"""The policy's attention written with our torch ops beside the same attention written with PyG's.

    pip install torch_geometric    # only this benchmark needs it
    python benchmarks/bench_message_passing.py [--rounds 7] [--threads 1]

The sparse graph transformer's one message-passing step (``MessagePassingOps.attend``: scores on
the edges, a softmax over each node's incoming edges, the weighted messages summed into nodes) is
timed as the encoder calls it (``attend_packed``: Q, K, V side by side, edge features as rows of a
per-relation table), forward and backward (training) and forward alone without gradients (a live
query), on random graphs the sizes of one live query's subgraph and of a
training batch of them, with the ``deep`` policy's 4 heads of width 4:

- ``torch``: the package's ``TorchOps`` (``SparseAttention``, one autograd node with its gradient
  written out; CSR sums on large views);
- ``torch reference``: the same attention in plain autograd with the package's ``scatter_softmax``
  and ``index_add`` (``reference_attention``'s operations);
- ``pyg``: the same attention in plain autograd with ``torch_geometric.utils.softmax`` and
  ``torch_geometric.utils.scatter`` (what a maintained graph library gives);
- ``dgl`` where DGL is installed (``DGLOps``).

Every variant's output and gradients are first checked against ``torch reference`` (atol 1e-5).
Rounds alternate the variants; medians are reported, with each one's ratio to ``torch``.
Writes benchmarks/results/message-passing.{json,md}.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result  # noqa: E402
from seeder_dgl.model.ops import TorchGraph, TorchOps, dgl_available, scatter_softmax  # noqa: E402

SIZES = {"one query (500 nodes, 4,000 edges)": (500, 4_000),
         "a training batch (8,000 nodes, 64,000 edges)": (8_000, 64_000)}
HEADS, HEAD_DIM, RELATIONS = 4, 4, 18


def plain_attention(softmax, scatter_sum):
    """``attend_packed`` in plain autograd, given a segment softmax and a sum of edge rows into nodes."""

    def attend(graph: TorchGraph, qkv, table, rel):
        width = qkv.shape[1] // 3
        n, m = qkv.shape[0], rel.shape[0]
        q, k, v = (qkv[:, i * width:(i + 1) * width].reshape(n, HEADS, HEAD_DIM) for i in range(3))
        edge = table.index_select(0, rel)
        ek, ev = edge[:, :width].reshape(m, HEADS, HEAD_DIM), edge[:, width:].reshape(m, HEADS, HEAD_DIM)
        src, dst = graph.src, graph.dst
        scores = (q.index_select(0, dst) * (k.index_select(0, src) * ek)).sum(-1, keepdim=True) / math.sqrt(HEAD_DIM)
        alpha = softmax(scores, dst, graph.num_nodes)
        return scatter_sum(alpha * (v.index_select(0, src) + ev), dst, graph.num_nodes).reshape(n, width)

    return attend


def torch_reference():
    """With the package's ``scatter_softmax`` and ``index_add``: ``reference_attention``'s operations."""
    return plain_attention(scatter_softmax,
                           lambda x, index, n: x.new_zeros((n,) + tuple(x.shape[1:])).index_add(0, index, x))


def pyg():
    """With ``torch_geometric.utils.softmax`` and ``torch_geometric.utils.scatter``."""
    from torch_geometric.utils import scatter, softmax

    return plain_attention(lambda x, index, n: softmax(x, index, num_nodes=n),
                           lambda x, index, n: scatter(x, index, dim=0, dim_size=n, reduce="sum"))


def inputs(nodes: int, edges: int, seed: int = 0):
    """Graph indices and [qkv, table, rel] as the encoder passes them."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(nodes, (edges,), generator=gen)
    dst = torch.randint(nodes, (edges,), generator=gen)
    width = HEADS * HEAD_DIM
    return src, dst, [torch.randn(nodes, 3 * width, generator=gen), torch.randn(RELATIONS, 2 * width, generator=gen),
                      torch.randint(RELATIONS, (edges,), generator=gen)]


def variants() -> dict:
    """name -> (attend(graph, qkv, table, rel), graph maker(src, dst, n))."""
    ops = TorchOps()
    out = {"torch": (lambda g, qkv, table, rel: ops.attend_packed(g, qkv, table, rel, HEADS), TorchGraph),
           "torch reference": (torch_reference(), TorchGraph),
           "pyg": (pyg(), TorchGraph)}
    if dgl_available():
        from seeder_dgl.model.batch import GraphView
        from seeder_dgl.model.ops import DGLOps

        dgl_ops = DGLOps()
        out["dgl"] = (lambda g, qkv, table, rel: dgl_ops.attend_packed(g, qkv, table, rel, HEADS),
                      lambda src, dst, n: dgl_ops.prepare(GraphView(nodes=torch.arange(n), src=src, dst=dst,
                                                                    rel=torch.zeros_like(src), num_nodes=n)))
    return out


def forward(attend, graph, tensors) -> None:
    """Forward once without gradients, as a live query runs the policy."""
    with torch.no_grad():
        attend(graph, *tensors)


def step(attend, graph, tensors) -> list[torch.Tensor]:
    """Forward and backward once; the output and the gradients of qkv and the table."""
    qkv, table, rel = tensors
    leaves = [qkv.detach().clone().requires_grad_(True), table.detach().clone().requires_grad_(True)]
    out = attend(graph, *leaves, rel)
    out.backward(torch.ones_like(out))
    return [out.detach()] + [t.grad for t in leaves]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="alternated rounds; medians are reported")
    parser.add_argument("--repeats", type=int, default=20, help="forward+backward steps timed per round")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--name", default="message-passing", help="result file name under benchmarks/results/")
    args = parser.parse_args()
    try:
        import torch_geometric
    except ImportError:
        raise SystemExit("this benchmark compares with PyG: pip install torch_geometric")
    torch.set_num_threads(args.threads)

    rows = []
    for size, (nodes, edges) in SIZES.items():
        src, dst, tensors = inputs(nodes, edges)
        made = {name: (attend, make(src, dst, nodes)) for name, (attend, make) in variants().items()}
        want = step(*made["torch reference"], tensors)
        for name, (attend, graph) in made.items():
            for got, ref in zip(step(attend, graph, tensors), want):
                torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name} differs: {m}")
        for mode, run in (("forward and backward", step), ("forward, no grad", forward)):
            times = {name: [] for name in made}
            for _ in range(args.rounds):
                for name, (attend, graph) in made.items():
                    run(attend, graph, tensors)  # warm
                    start = time.perf_counter()
                    for _ in range(args.repeats):
                        run(attend, graph, tensors)
                    times[name].append((time.perf_counter() - start) / args.repeats * 1000)
            base = statistics.median(times["torch"])
            for name, ms in times.items():
                rows.append({"size": size, "mode": mode, "variant": name, "median_ms": round(statistics.median(ms), 3),
                             "rounds_ms": [round(t, 3) for t in ms],
                             "ratio_to_torch": round(statistics.median(ms) / base, 2)})

    payload = {"machine": machine(), "threads": args.threads, "rounds": args.rounds, "repeats": args.repeats,
               "heads": HEADS, "head_dim": HEAD_DIM, "torch": torch.__version__,
               "torch_geometric": torch_geometric.__version__, "rows": rows}
    md = ["# The policy's attention: our torch ops and PyG's, side by side", "",
          f"Command: `python benchmarks/bench_message_passing.py --rounds {args.rounds} --threads {args.threads}`: "
          f"one attention step forward and backward, and forward alone without gradients as a live query runs it ({HEADS} heads of {HEAD_DIM}), median over {args.rounds} "
          f"alternated rounds of {args.repeats} steps; torch {torch.__version__}, torch_geometric "
          f"{torch_geometric.__version__}. Outputs and gradients agree with `torch reference` within 1e-5.", "",
          "| graph | pass | variant | median ms | ratio to torch |", "|---|---|---|---:|---:|"]
    md += [f"| {r['size']} | {r['mode']} | {r['variant']} | {r['median_ms']:.3f} | {r['ratio_to_torch']:.2f}x |"
           for r in rows]
    text = "\n".join(md)
    print(text)
    write_result(args.name, payload, text)


if __name__ == "__main__":
    main()
