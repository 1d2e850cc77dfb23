"""The C allocator setting of seeder-dgl's own processes (``seeder_dgl.allocator``).

Each check runs in a fresh interpreter: the setting is process-wide and made once, and the pytest
process itself must keep the system's allocator as a library user's program would."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seeder_dgl.allocator import _glibc

REPO = Path(__file__).resolve().parents[2]
glibc_only = pytest.mark.skipif(not _glibc(), reason="mallopt and mallinfo2 are glibc's")

# While a 64 MB array is held: bytes in blocks glibc mapped on their own (hblkhd); after it is freed:
# free bytes the heap keeps (fordblks). mallinfo2 has ten size_t fields; hblkhd is the 5th, fordblks the 9th.
PROBE = r"""
import ctypes, json, sys
import numpy as np
from seeder_dgl.allocator import configure_allocator
decided = configure_allocator() if sys.argv[1] == "configure" else None

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
block = np.ones(64 << 20, dtype=np.uint8)
mapped = libc.mallinfo2().hblkhd
del block
kept = libc.mallinfo2().fordblks
print(json.dumps({"decided": decided, "mapped": mapped, "kept": kept}))
"""


def _probe(mode: str | None, configure: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "SEEDER_MALLOC"}
    if mode is not None:
        env["SEEDER_MALLOC"] = mode
    out = subprocess.run([sys.executable, "-c", PROBE, "configure" if configure else "leave"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_keep_serves_a_large_block_from_the_heap_and_keeps_it_after_free():
    keep = _probe(None)
    assert keep["decided"] == {"mode": "keep", "applied": True}
    assert keep["mapped"] < 64 << 20  # not a mapping of its own ...
    assert keep["kept"] >= 64 << 20  # ... and still the process's to reuse once freed


@glibc_only
def test_system_and_a_process_that_never_asks_keep_glibcs_defaults():
    for probe in (_probe("system"), _probe(None, configure=False)):
        assert probe["mapped"] >= 64 << 20  # glibc maps a block this large on its own ...
        assert probe["kept"] < 64 << 20  # ... and unmaps it on free
    assert _probe(" System ")["decided"] == {"mode": "system", "applied": False}


def test_a_bad_mode_stops_the_command_in_one_line_before_it_runs():
    env = {**os.environ, "SEEDER_MALLOC": "jemalloc"}
    out = subprocess.run([sys.executable, "-m", "seeder_dgl.cli", "status"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert lines == ["error: SEEDER_MALLOC must be one of keep, system, not 'jemalloc': fix or unset it"]
    assert "Neo4j" not in out.stdout  # the command itself never ran


FIT = r"""
import hashlib, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from seeder_dgl.allocator import configure_allocator
configure_allocator()
from tests.unit.test_linking import _examples
from seeder_dgl.retrieval.linking import fit_linker
linker = fit_linker(_examples(np.random.default_rng(0), 300), {"films": 0.9}, ["person", "tag"], steps=50, seed=0)
print(hashlib.sha256(linker.to_json().encode()).hexdigest())
"""


@glibc_only
def test_a_fit_is_the_same_bit_for_bit_with_either_allocator():
    """Reused heap memory is not zeroed as fresh mappings are: a result that read memory it never
    wrote would differ here."""
    digests = set()
    for mode in ("keep", "system"):
        out = subprocess.run([sys.executable, "-c", FIT, str(REPO)], cwd=REPO,
                             env={**os.environ, "SEEDER_MALLOC": mode}, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        digests.add(out.stdout.strip().splitlines()[-1])
    assert len(digests) == 1
