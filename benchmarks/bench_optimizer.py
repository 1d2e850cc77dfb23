"""The optimiser step of the MetaQA policy: torch's AdamW (fused, foreach) beside the flat-vector
AdamW the trainer used before (``FlatAdamW``, kept here only as the reference it was measured
against), alternated in one run on one thread.

    python benchmarks/bench_optimizer.py [--checkpoint runs/metaqa/deep-full/best.pt] [--rounds 7]

Each variant: fresh random gradients for every parameter, global gradient-norm clipping, one
``step``; the time of the gradients alone is measured beside them and subtracted. Also prints a
training step's mean time from the checkpoint's run (``last.pt``'s history) for scale. Writes
benchmarks/results/optimizer-step.{json,md}.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from itertools import accumulate
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, write_result  # noqa: E402


class FlatAdamW(torch.optim.AdamW):
    """The removed ``seeder_dgl.training.optimizer.FlatAdamW``'s step: every parameter a view of one
    flat vector, its gradients gathered into one, AdamW stepping that vector."""

    def __init__(self, params, lr: float, weight_decay: float):
        self.views = [p for p in params if p.requires_grad]
        flat = torch.cat([p.detach().reshape(-1) for p in self.views])
        offset = 0
        for p in self.views:
            p.data = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        self.flat = nn.Parameter(flat)
        self.segments = [slice(end - p.numel(), end) for p, end in zip(self.views, accumulate(p.numel() for p in self.views))]
        super().__init__([self.flat], lr=lr, weight_decay=weight_decay, foreach=True)

    def gather_gradients(self) -> None:
        self.flat.grad = torch.cat([p.grad.reshape(-1) for p in self.views])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default="runs/metaqa/deep-full/best.pt")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from seeder_dgl.inference import load_policy

    loaded = load_policy(args.checkpoint)
    state = {k: v.clone() for k, v in loaded.policy.state_dict().items()}

    def fresh() -> nn.Module:
        module = loaded.policy
        module.load_state_dict(state)
        return module

    import copy

    models = {name: copy.deepcopy(fresh()) for name in ("flat", "fused", "foreach", "gradients")}
    lr, wd, clip = 3e-3, 1e-5, 1.0
    flat = FlatAdamW(models["flat"].parameters(), lr=lr, weight_decay=wd)
    fused = torch.optim.AdamW(models["fused"].parameters(), lr=lr, weight_decay=wd, fused=True)
    foreach = torch.optim.AdamW(models["foreach"].parameters(), lr=lr, weight_decay=wd, foreach=True)

    def gradients(model: nn.Module) -> None:
        for p in model.parameters():
            p.grad = torch.randn_like(p)

    def step_flat() -> None:
        gradients(models["flat"])
        flat.gather_gradients()
        torch.nn.utils.clip_grad_norm_([flat.flat], clip)
        flat.step()

    def step_torch(name: str, optimizer: torch.optim.Optimizer):
        def step() -> None:
            gradients(models[name])
            torch.nn.utils.clip_grad_norm_(models[name].parameters(), clip)
            optimizer.step()
        return step

    variants = {"FlatAdamW (before)": step_flat, "torch AdamW fused=True": step_torch("fused", fused),
                "torch AdamW foreach=True": step_torch("foreach", foreach),
                "gradients alone": lambda: gradients(models["gradients"])}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, fn in variants.items():
            for _ in range(20):
                fn()
            tick = time.perf_counter()
            for _ in range(args.steps):
                fn()
            times[name].append((time.perf_counter() - tick) / args.steps * 1000)
    base = statistics.median(times["gradients alone"])
    medians = {name: statistics.median(v) - (0 if name == "gradients alone" else base) for name, v in times.items()}
    last = Path(args.checkpoint).with_name("last.pt")  # the run's history lives in last.pt
    history = torch.load(last, map_location="cpu", weights_only=False).get("history", []) if last.exists() else []
    step_ms = None
    if history:  # seconds of one epoch's training over its steps: a training step's mean, both processes
        row = history[-1]
        step_ms = 1000 * row["train_seconds"] / max(row["steps"], 1)
    params = sum(p.numel() for p in models["fused"].parameters())
    payload = {"machine": machine(), "checkpoint": args.checkpoint, "parameters": params,
               "tensors": len(list(models["fused"].parameters())), "rounds": args.rounds, "steps": args.steps,
               "times_ms": times, "step_ms_medians_less_gradients": medians, "training_step_ms": step_ms}
    lines = ["# The optimiser step of the MetaQA policy", "",
             f"Machine: {payload['machine']['cpu']}, {payload['machine']['cores']} cores, one thread. "
             f"`python benchmarks/bench_optimizer.py --rounds {args.rounds}`: {params:,} parameters in "
             f"{payload['tensors']} tensors ({args.checkpoint}); each variant alternated, {args.steps} steps a "
             "round; medians of the rounds, the time of drawing the gradients subtracted.", "",
             "| optimiser step (clipping included) | ms | against FlatAdamW |", "|---|---:|---:|"]
    ref = medians["FlatAdamW (before)"]
    for name in ("FlatAdamW (before)", "torch AdamW fused=True", "torch AdamW foreach=True"):
        lines.append(f"| {name} | {medians[name]:.3f} | {medians[name] / ref:.2f}x |")
    if step_ms:
        extra = medians["torch AdamW fused=True"] - ref
        lines += ["", f"A training step of the checkpoint's last epoch took {step_ms:.1f} ms; fused AdamW adds "
                      f"{extra:.2f} ms to it ({100 * extra / step_ms:.1f}%)."]
    write_result("optimizer-step", payload, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
