"""Writing results people read and plot: JSON + Markdown side by side, atomically."""
from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def write_result(name: str, payload: dict, markdown: str, folder: Path | None = None) -> Path:
    """``<folder>/<name>.json`` and ``.md`` (default folder: benchmarks/results/)."""
    folder = Path(folder) if folder else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps(payload, indent=2, sort_keys=True, default=str)), (".md", markdown)):
        path = folder / f"{name}{suffix}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, path)
    return folder / f"{name}.md"
