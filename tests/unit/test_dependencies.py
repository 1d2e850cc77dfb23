"""The core installs beside the Python stack people run now: no DGL and no upper bound on torch,
NumPy, pandas, transformers, sentence-transformers or the neo4j driver; DGL's pins live in the
`dgl` extra only, and the environment the tests run in actually holds the current stack."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[2]
STACK = ("torch", "numpy", "pandas", "transformers", "sentence-transformers", "neo4j", "scipy", "pyarrow")


def _requirements(section: list[str]) -> dict[str, str]:
    parsed = {}
    for line in section:
        match = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)", line)
        parsed[match.group(1).lower()] = match.group(3).strip()
    return parsed


def test_the_core_has_no_dgl_and_no_upper_bound_on_the_stack():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = _requirements(project["dependencies"])
    assert "dgl" not in core and "torchdata" not in core
    for name in STACK:
        if name in core:
            assert "<" not in core[name] and "==" not in core[name], f"{name} {core[name]}"
    dgl = _requirements(project["optional-dependencies"]["dgl"])
    assert dgl["dgl"] == "==2.1.0" and dgl["torch"] == "==2.2.1"
    assert not project["requires-python"].count("<")


def test_the_core_lane_runs_on_the_current_stack():
    """`make test-core` runs in a venv without DGL on NumPy 2 and torch 2.5+ (the newest that
    resolve); the DGL lane (`make test-dgl`) is where the old stack is tested."""
    import numpy
    import torch

    from seeder_dgl.model import dgl_available

    if dgl_available("cpu"):
        pytest.skip("this venv has the DGL extra (the DGL lane): the old stack is expected here")
    assert int(numpy.__version__.split(".")[0]) >= 2
    assert tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)
