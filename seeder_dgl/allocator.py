"""The C allocator's settings for seeder-dgl's own processes (every `seeder-dgl` command).

glibc's malloc serves a large block (from 128 KB, rising with use to at most 32 MB) by mapping fresh
pages from the kernel, and gives them back on free; it also trims freed memory off the top of its
heap. torch and NumPy allocate a new output for almost every operation, so a fit over hundreds of
thousands of rows pays the kernel's page faults and zeroing again for every intermediate: adding 1
to a float32 array of 278,000 x 32 took 42 ms with a fresh mapping against 4.6 ms in memory the
process already held (2-core AMD EPYC), and 100 steps of the entity linker's fit
(``retrieval.linking.fit_linker``) on that many rows 36.0 s against 21.7 s. Training steps, whose
tensors are smaller, ran as fast either way (``benchmarks/README.md``, 2026-12-01). PyTorch's own CPU tuning guide gives the same
reason for swapping in jemalloc or TCMalloc; glibc's ``mallopt`` does it in-process, without a
preloaded library: blocks come from the heap, and freed memory stays with the process up to
``TRIM_THRESHOLD`` for the next operation to reuse. Only the allocator's bookkeeping changes: every
result is the same bit for bit.

It applies to the processes the command line starts (``cli.main``), not to a program that imports
seeder_dgl as a library: there the allocator is that program's to choose. ``SEEDER_MALLOC=system``
leaves glibc's defaults; elsewhere than glibc (macOS, musl, Windows) nothing changes.
"""
from __future__ import annotations

import ctypes
import os

from seeder_dgl.settings import settings

M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
TRIM_THRESHOLD = 512 << 20
"""Free memory at the top of the heap kept for reuse (bytes) before glibc returns it to the system:
what one step of a fit frees is there for the next, and a process holds at most this much beyond
what it uses."""

_applied: dict | None = None


def configure_allocator() -> dict:
    """Apply ``SEEDER_MALLOC``'s mode (``Settings.malloc``) once per process and return what was
    decided: ``{"mode": ..., "applied": bool}``. ``keep`` (the default): blocks from the heap, never
    from new mappings (``M_MMAP_MAX`` 0), and up to ``TRIM_THRESHOLD`` of freed memory kept. A bad
    value is the settings' one-line ``SeederError``."""
    global _applied
    if _applied is not None:
        return _applied
    mode = settings().malloc
    applied = False
    if mode == "keep" and _glibc():
        libc = ctypes.CDLL(None)
        # Each call returns 1 on success; a glibc that refuses one keeps its default for it.
        mapped = libc.mallopt(M_MMAP_MAX, 0)
        trimmed = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        applied = mapped == 1 and trimmed == 1
    _applied = {"mode": mode, "applied": applied}
    return _applied


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):  # not a POSIX system, or not glibc's confstr name
        return False
