"""Shared bits of the benchmark commands: where results go, machine facts, atomic writes."""
from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

from seeder_dgl.reporting import RESULTS, write_result  # noqa: F401  (re-exported for the benchmarks)


def machine() -> dict:
    import psutil

    cpu = platform.processor() or ""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:  # a GPU machine that only trains has no Java
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    except OSError:
        java = []
    out = {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
           "python": platform.python_version(), "java": java[0] if java else "n/a", "os": platform.platform()}
    try:
        import torch

        if torch.cuda.is_available():
            out["gpu"] = torch.cuda.get_device_name(0)
            out["torch"] = torch.__version__
    except ImportError:
        pass
    return out


def cpu_probe() -> float:
    """Milliseconds one core takes for a fixed Python loop (best of three), recorded before and
    after a benchmark: this shared 2-core machine has run the same loop from 330 to 1,030 ms
    within one day, so absolute latencies are comparable only between runs with similar probes."""
    import time

    best = float("inf")
    for _ in range(3):
        start, total = time.perf_counter(), 0
        for i in range(5_000_000):
            total += i
        best = min(best, time.perf_counter() - start)
    return round(best * 1000, 1)


def probe_line(before: float, after: float) -> str:
    return (f"CPU probe (a fixed 5M-step Python loop on one core; lower is faster): {before:.0f} ms "
            f"before, {after:.0f} ms after.")


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def percentile(values, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


def ranked_ids(retriever, questions: list[str], k: int) -> list[list[int]]:
    """Each question's top ``k`` node ids, as a user's code gets them (``Retriever.retrieve_many``)."""
    return [[n.id for n in res.nodes] for res in retriever.retrieve_many(questions, k=k)]


def hit_rates(ranked: list[list[int]], answers: list[set], idx: list[int], k: int) -> dict:
    """Hit@1 and Hit@k over the questions ``idx``: ``ranked[i]`` a question's ranked node ids,
    ``answers[i]`` its answers' ids."""
    import numpy as np

    return {"questions": len(idx),
            "hit@1": round(float(np.mean([bool(ranked[i]) and ranked[i][0] in answers[i] for i in idx])), 4),
            f"hit@{k}": round(float(np.mean([bool(set(ranked[i][:k]) & answers[i]) for i in idx])), 4)}


def written_and_typed(retriever, rows: list[tuple], typed_name: str, k: int):
    """Rows (..., written question, typed question, answer ids) as their last three fields, asked both
    ways through ``retriever``: a function from a row predicate to ``{form: hit_rates}`` over the rows
    it picks, the forms "as written" and ``typed_name``."""
    found = {form: ranked_ids(retriever, [r[column] for r in rows], k)
             for form, column in (("as written", -3), (typed_name, -2))}
    answers = [r[-1] for r in rows]

    def hits(pick) -> dict:
        idx = [i for i, r in enumerate(rows) if pick(r)]
        return {form: hit_rates(ranked, answers, idx, k) for form, ranked in found.items()}

    return hits


STACK_PACKAGES = ("torch", "numpy", "pandas", "transformers", "sentence-transformers", "neo4j", "dgl")


def stack_versions(python: str) -> dict:
    """The versions of the Python stack that ``python`` imports (None where a package is absent):
    runs with another Python (``--baseline-python``) compare stacks on the same code."""
    code = ("import json, importlib.metadata as m\n"
            "def v(n):\n"
            "    try: return m.version(n)\n"
            "    except m.PackageNotFoundError: return None\n"
            f"print(json.dumps({{n: v(n) for n in {list(STACK_PACKAGES)!r}}}))")
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def stack_line(versions: dict) -> str:
    return ", ".join(f"{name} {version}" for name, version in versions.items() if version)
