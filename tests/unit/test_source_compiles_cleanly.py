"""Every Python file of the package, the loaders and the benchmarks compiles without a warning: an
invalid escape such as '\\[' in a help text is a DeprecationWarning on Python 3.11, a SyntaxWarning
from 3.12, and meant to become an error."""
from __future__ import annotations

import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_no_python_file_compiles_with_a_warning():
    files = [p for folder in ("seeder_dgl", "loaders", "benchmarks", "tests") for p in (REPO / folder).rglob("*.py")]
    assert len(files) > 50
    noisy = []
    for path in files:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compile(path.read_text(encoding="utf-8"), str(path), "exec")
        noisy += [f"{path.relative_to(REPO)}: {w.message}" for w in caught]
    assert noisy == []
