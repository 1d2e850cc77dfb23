"""Atomic file writes: a temporary file in the same folder, fsync, then one rename.

A reader (or a resumed run) sees the old file or the new one, never half of one; a writer killed
part way leaves at most a stray temporary file.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, payload: Any, **dumps) -> Path:
    """JSON (indented, sorted keys unless told otherwise; str() for what JSON cannot hold)."""
    dumps.setdefault("indent", 2)
    dumps.setdefault("sort_keys", True)
    dumps.setdefault("default", str)
    return atomic_write_text(path, json.dumps(payload, **dumps) + "\n")
