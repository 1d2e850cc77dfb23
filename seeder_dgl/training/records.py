"""Run records written beside the checkpoints, so a run can be read (and reproduced) without code.

* ``config.json``: the full TrainConfig, dataset meta, seed, device, thread settings, sizes and
  library versions;
* ``metrics.json``: per epoch the training losses, reward, gradient norm, time, throughput and
  validation metrics; the untrained policy's validation metrics; the best epoch;
* ``history.csv``: the same per-epoch numbers as a flat table;
* ``curves.png``: loss, reward and validation Recall@20 / Hit@1 / MRR per epoch.

Every file is written atomically (temporary file, then ``os.replace``), so a killed run never
leaves a half-written record.
"""
from __future__ import annotations

import csv
import io
import json
import math
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from seeder_dgl.fileio import atomic_write_bytes, atomic_write_text  # noqa: F401  (re-exported)
from seeder_dgl.paths import source_checkout

CONFIG_FILE, METRICS_FILE, HISTORY_FILE, CURVES_FILE = "config.json", "metrics.json", "history.csv", "curves.png"
PACKAGES = ("torch", "dgl", "numpy", "neo4j", "sentence-transformers", "seeder-dgl")


def _json_safe(value: Any) -> Any:
    """Plain JSON: tuples → lists, numpy/torch scalars → numbers, NaN/inf → null, paths → strings."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy / torch scalar
        return _json_safe(value.item())
    if hasattr(value, "tolist"):
        return _json_safe(value.tolist())
    return str(value)


def atomic_write_json(path: str | Path, payload: Any) -> Path:
    return atomic_write_text(path, json.dumps(_json_safe(payload), indent=2) + "\n")


def library_versions() -> dict[str, str | None]:
    """Python and the versions of the libraries a run depends on (None: not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version(), "platform": platform.platform()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    try:
        import torch

        out["torch_cuda"] = torch.version.cuda
    except Exception:  # pragma: no cover - torch is a dependency
        pass
    out["git_commit"] = _git_commit()
    return out


def _git_commit() -> str | None:
    """The checkout's commit (read-only ``git rev-parse``), None outside a git checkout."""
    try:
        repo = source_checkout()
        if repo is None:
            return None
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=5)
        return done.stdout.strip() or None if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def count_parameters(module) -> int:
    return int(sum(p.numel() for p in module.parameters() if p.requires_grad))


def write_config(out_dir: str | Path, payload: dict[str, Any]) -> Path:
    """``config.json``: ``payload`` (config, dataset meta, sizes...) plus versions and the command line."""
    record = dict(payload)
    record.setdefault("versions", library_versions())
    record.setdefault("argv", list(sys.argv))
    record.setdefault("written_at", now())
    return atomic_write_json(Path(out_dir) / CONFIG_FILE, record)


def flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{'val': {'recall@20': x}}`` → ``{'val_recall@20': x}``."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}_"))
        else:
            out[name] = value
    return out


def write_history_csv(out_dir: str | Path, history: Sequence[dict[str, Any]]) -> Path:
    rows = [flatten(r) for r in history]
    columns: list[str] = []
    for r in rows:
        columns.extend(c for c in r if c not in columns)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({c: _json_safe(r.get(c)) for c in columns})
    return atomic_write_text(Path(out_dir) / HISTORY_FILE, buffer.getvalue())


def write_metrics(out_dir: str | Path, history: Sequence[dict[str, Any]], *, best_epoch: int | None,
                  selection_metric: str, initial_validation: dict[str, float] | None = None,
                  extra: dict[str, Any] | None = None) -> Path:
    best = next((r for r in history if r["epoch"] == best_epoch), None)
    payload = {
        "selection_metric": selection_metric,
        "best_epoch": best_epoch,
        "best_validation": best["val"] if best else None,
        "initial_validation": initial_validation,
        "epochs": list(history),
        **(extra or {}),
    }
    return atomic_write_json(Path(out_dir) / METRICS_FILE, payload)


def plot_curves(out_dir: str | Path, history: Sequence[dict[str, Any]], *, title: str = "",
                initial_validation: dict[str, float] | None = None) -> Path:
    """``curves.png``: training loss (total, RL, BPR), mean reward, validation R@20 / Hit@1 / MRR.

    Uses matplotlib's Agg canvas directly (no pyplot): no global backend state, no display needed.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    epochs = [r["epoch"] for r in history]
    fig = Figure(figsize=(12, 3.6), dpi=100)
    FigureCanvasAgg(fig)
    ax_loss, ax_reward, ax_val = fig.subplots(1, 3)
    for key, label in (("loss", "total"), ("rl_loss", "RL"), ("bpr_loss", "BPR")):
        ax_loss.plot(epochs, [r.get(key) for r in history], marker="o", label=label)
    ax_loss.set(title="training loss", xlabel="epoch")
    ax_loss.legend()
    ax_reward.plot(epochs, [r.get("reward") for r in history], marker="o", color="tab:green")
    ax_reward.set(title="mean reward (Recall@any of V_T)", xlabel="epoch")
    for key, label in (("recall@20", "Recall@20"), ("hit@1", "Hit@1"), ("mrr", "MRR")):
        xs, ys = list(epochs), [r["val"].get(key) for r in history]
        if initial_validation:
            xs, ys = [0] + xs, [initial_validation.get(key)] + ys
        ax_val.plot(xs, ys, marker="o", label=label)
    ax_val.set(title="validation", xlabel="epoch (0 = untrained)")
    ax_val.legend()
    for ax in (ax_loss, ax_reward, ax_val):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return atomic_write_bytes(Path(out_dir) / CURVES_FILE, buffer.getvalue())


def write_run_records(out_dir: str | Path, history: Sequence[dict[str, Any]], *, best_epoch: int | None,
                      selection_metric: str, initial_validation: dict[str, float] | None = None,
                      extra: dict[str, Any] | None = None, title: str = "") -> None:
    """metrics.json, history.csv and curves.png for the epochs so far."""
    write_metrics(out_dir, history, best_epoch=best_epoch, selection_metric=selection_metric,
                  initial_validation=initial_validation, extra=extra)
    write_history_csv(out_dir, history)
    if history:
        plot_curves(out_dir, history, title=title, initial_validation=initial_validation)
