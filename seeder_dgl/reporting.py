"""Writing results people read and plot: JSON + Markdown side by side, atomically."""
from __future__ import annotations

from pathlib import Path

from seeder_dgl.fileio import atomic_write_json, atomic_write_text
from seeder_dgl.paths import results_dir

RESULTS = results_dir()


def write_result(name: str, payload: dict, markdown: str, folder: Path | None = None) -> Path:
    """``<folder>/<name>.json`` and ``.md`` (default folder: benchmarks/results/)."""
    folder = Path(folder) if folder else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / f"{name}.json", payload)
    return atomic_write_text(folder / f"{name}.md", markdown + "\n")
