"""The package's layers import one way and no package's modules import each other in a cycle
(the import-linter contracts in pyproject.toml; imports inside functions count too)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint(config: Path | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    args = [exe, "--no-cache"] + (["--config", str(config)] if config else [])
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_layer_and_cycle_contracts_hold():
    run = _lint()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "2 kept, 0 broken" in run.stdout


def test_the_contracts_catch_an_import_upwards(tmp_path):
    # The same contracts with the layers read bottom-up: every real import then points the wrong way.
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = config["contracts"][0]["layers"]
    lines = ["[importlinter]", "root_packages =", *[f"    {p}" for p in config["root_packages"]], "",
             "[importlinter:contract:upside-down]", "name = upside down", "type = layers", "layers ="]
    lines += [f"    {layer}" for layer in reversed(layers)]
    (tmp_path / "upside.ini").write_text("\n".join(lines) + "\n")
    run = _lint(tmp_path / "upside.ini")
    assert run.returncode != 0 and "BROKEN" in run.stdout, run.stdout[-2000:]
