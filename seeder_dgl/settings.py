"""seeder-dgl's configuration: its ``SEEDER_*`` and ``NEO4J_*`` environment variables, in one typed
object read in one place.

``Settings.from_env()`` reads and checks them all at once; ``settings()`` is the current
environment's ``Settings`` (rebuilt when one of the variables changes, so a test's
``monkeypatch.setenv`` is seen). A bad value is a one-line ``SeederError`` that names the variable.
The README's "Configuration" table lists the same variables.

A path variable that is set but empty counts as unset. Defaults that depend on the project root
(``seeder_dgl.paths``) or on the supported Neo4j releases (``graphstore.versions``) are filled in
where they are used: such a field is None here when its variable is unset.

Reads of the environment that stay elsewhere, because they configure other programs rather than
seeder-dgl:

- ``seeder_dgl/threads.py``: ``OMP_NUM_THREADS`` (and sets ``MKL_NUM_THREADS``,
  ``OMP_WAIT_POLICY``) for the BLAS and OpenMP runtimes, before torch loads;
- ``seeder_dgl/embeddings.py``: ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE`` set by default for
  Hugging Face when the encoder is a local folder;
- ``seeder_dgl/graphstore/server.py``: ``JAVA_HOME`` (which Java runs Neo4j) and the whole
  environment handed to the Neo4j process;
- ``seeder_dgl/graphstore/procedures.py``: the whole environment handed to Maven;
- ``seeder_dgl/training/``: the torch.distributed variables of the training processes (the world
  torchrun describes: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR``; gloo's ``GLOO_SOCKET_IFNAME``) and ``OMP_NUM_THREADS`` in a run record;
- ``SEEDER_API_KEY``: a default of ``serve --api-key``, read by the CLI's option parser (it is a
  secret of one command, shown in its ``--help``);
- ``CI``, ``SEEDER_TEST_NEO4J_PORT``, ``SEEDER_REQUIRE_DGL``, ``SEEDER_SCREENSHOT_DIR``: read by
  the tests only.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Mapping

from seeder_dgl.errors import SeederError

KHOP_ENGINES = ("auto", "procedure", "cypher")
"""The values of ``SEEDER_KHOP`` (and of ``LiveGraph(khop=...)``)."""
ENCODER_BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
"""The values of ``SEEDER_ENCODER_BACKEND`` (and of ``TextEncoder(backend=...)``)."""
MALLOC_MODES = ("keep", "system")
"""The values of ``SEEDER_MALLOC`` (``seeder_dgl.allocator``)."""


def _var(name: str, **kwargs):
    return field(metadata={"env": name}, **kwargs)


@dataclass(frozen=True)
class Settings:
    """seeder-dgl's configuration: one field per environment variable (its ``env`` metadata)."""

    home: Path | None = _var("SEEDER_HOME", default=None)
    """``SEEDER_HOME``: the project root, which holds ``.cache/``, ``runs/``, ``.neo4j/`` and
    ``benchmarks/results/``. Default (None): the source checkout, else the current folder."""
    cache: Path | None = _var("SEEDER_CACHE", default=None)
    """``SEEDER_CACHE``: embeddings, graph exports and extracted subgraphs. Default (None):
    ``.cache/`` in the project root."""
    runs: Path | None = _var("SEEDER_RUNS", default=None)
    """``SEEDER_RUNS``: checkpoints and their run records. Default (None): ``runs/`` in the project root."""
    embeddings: Path | None = _var("SEEDER_EMBEDDINGS", default=None)
    """``SEEDER_EMBEDDINGS``: the text-embedding cache on its own, so runs with separate caches can
    share it. Default (None): ``embeddings/`` in the cache."""
    stark_qa: Path | None = _var("SEEDER_STARK_QA", default=None)
    """``SEEDER_STARK_QA``: the folder of STaRK's question files. Default (None):
    ``../shared/data/stark/qa`` beside the project root, where present."""
    neo4j_uri: str | None = _var("NEO4J_URI", default=None)
    """``NEO4J_URI``: use this server (Docker, remote, Aura); nothing is started or stopped.
    Default (None): the project's local server on ``bolt://127.0.0.1:<neo4j_port>``."""
    neo4j_user: str = _var("NEO4J_USER", default="neo4j")
    """``NEO4J_USER``: the user name. Default ``neo4j``."""
    neo4j_password: str = _var("NEO4J_PASSWORD", default="seeder-dgl")
    """``NEO4J_PASSWORD``: the password, also the local server's initial one. Default ``seeder-dgl``."""
    neo4j_database: str | None = _var("NEO4J_DATABASE", default=None)
    """``NEO4J_DATABASE``: the database read and written when none is given. Default (None): the
    server's default database."""
    neo4j_port: int = _var("SEEDER_NEO4J_PORT", default=7687)
    """``SEEDER_NEO4J_PORT``: the Bolt port of the local server on 127.0.0.1. Default 7687."""
    neo4j_home: Path | None = _var("SEEDER_NEO4J_HOME", default=None)
    """``SEEDER_NEO4J_HOME``: jars, config, data and logs of the local server. Default (None):
    ``.neo4j/`` in the project root."""
    neo4j_version: str | None = _var("SEEDER_NEO4J_VERSION", default=None)
    """``SEEDER_NEO4J_VERSION``: the local server's release (``5.26.x``, ``YYYY.MM.x``, ``lts``,
    ``calendar``), checked by ``graphstore.versions.check_version`` when a server is set up.
    Default (None): the 5.26 LTS release ``graphstore.versions.NEO4J_VERSION``."""
    neo4j_heap: str = _var("SEEDER_NEO4J_HEAP", default="2g")
    """``SEEDER_NEO4J_HEAP``: the local server's JVM heap (-Xms/-Xmx). Default ``2g``."""
    neo4j_pagecache: str = _var("SEEDER_NEO4J_PAGECACHE", default="2g")
    """``SEEDER_NEO4J_PAGECACHE``: the local server's page cache. Default ``2g``."""
    neo4j_vector_buffer_mb: int = _var("SEEDER_NEO4J_VECTOR_BUFFER_MB", default=50)
    """``SEEDER_NEO4J_VECTOR_BUFFER_MB``: heap (MB) a vector index may fill while it is built before
    writing a segment: larger is faster seeding, slower ingest. Default 50 (Neo4j's own)."""
    neo4j_tx_memory: str | None = _var("SEEDER_NEO4J_TX_MEMORY", default=None)
    """``SEEDER_NEO4J_TX_MEMORY``: most heap one transaction of the local server may use
    (``db.memory.transaction.max``, a size such as ``256m``). Default (None): no cap of its own."""
    khop: str = _var("SEEDER_KHOP", default="auto")
    """``SEEDER_KHOP``: where K-hop runs, one of ``KHOP_ENGINES``: in the procedures when the server
    has them (``auto``), always (``procedure``), or as Cypher (``cypher``). Default ``auto``."""
    hop_partitions: int = _var("SEEDER_HOP_PARTITIONS", default=2)
    """``SEEDER_HOP_PARTITIONS``: concurrent Cypher queries per K-hop hop after the first (at least 1).
    Default 2."""
    name_readers: int = _var("SEEDER_NAME_READERS", default=4)
    """``SEEDER_NAME_READERS``: concurrent full-text name lookups in Neo4j while ``extract``, ``eval``
    and the entity linker's fit read the names of many questions (at least 1). The lookups wait on
    the server's Lucene, so reading several at once uses its cores while Python works. Default 4."""
    encoder_backend: str = _var("SEEDER_ENCODER_BACKEND", default="auto")
    """``SEEDER_ENCODER_BACKEND``: what embeds questions and templates, one of ``ENCODER_BACKENDS``:
    sentence-transformers on torch, the same model exported to ONNX Runtime (the ``onnx`` extra;
    ``seeder_dgl.onnx_queries``; embeddings equal within 2e-7), or its copy with 8-bit weights
    (``onnx-int8``: a few milliseconds less a query, embeddings within a cosine of 0.99 of the
    model's, so dense seeds can change). ``auto``: ONNX Runtime's float32 export where the extra is
    installed, the model runs on the CPU and the export agrees with torch, else torch. Node texts are
    always embedded with torch. Default ``auto``."""
    malloc: str = _var("SEEDER_MALLOC", default="keep")
    """``SEEDER_MALLOC``: the C allocator of seeder-dgl's own processes (``seeder_dgl.allocator``), one
    of ``MALLOC_MODES``: large blocks from the heap and freed memory kept for reuse (``keep``), or
    the system's defaults (``system``). Default ``keep``."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Settings":
        """The settings of ``environ``, every variable read and checked here."""

        def path(name: str) -> Path | None:
            raw = environ.get(name)
            return Path(raw).expanduser() if raw else None

        default = cls()
        return cls(
            home=path("SEEDER_HOME"),
            cache=path("SEEDER_CACHE"),
            runs=path("SEEDER_RUNS"),
            embeddings=path("SEEDER_EMBEDDINGS"),
            stark_qa=path("SEEDER_STARK_QA"),
            neo4j_uri=environ.get("NEO4J_URI") or None,
            neo4j_user=environ.get("NEO4J_USER", default.neo4j_user),
            neo4j_password=environ.get("NEO4J_PASSWORD", default.neo4j_password),
            neo4j_database=environ.get("NEO4J_DATABASE") or None,
            neo4j_port=_whole_number(environ, "SEEDER_NEO4J_PORT", default.neo4j_port),
            neo4j_home=path("SEEDER_NEO4J_HOME"),
            neo4j_version=environ.get("SEEDER_NEO4J_VERSION") or None,
            neo4j_heap=environ.get("SEEDER_NEO4J_HEAP", default.neo4j_heap),
            neo4j_pagecache=environ.get("SEEDER_NEO4J_PAGECACHE", default.neo4j_pagecache),
            neo4j_vector_buffer_mb=_whole_number(environ, "SEEDER_NEO4J_VECTOR_BUFFER_MB",
                                                 default.neo4j_vector_buffer_mb),
            neo4j_tx_memory=_size(environ, "SEEDER_NEO4J_TX_MEMORY"),
            khop=check_khop(environ.get("SEEDER_KHOP", default.khop)),
            hop_partitions=_at_least_one(environ, "SEEDER_HOP_PARTITIONS", default.hop_partitions),
            name_readers=_at_least_one(environ, "SEEDER_NAME_READERS", default.name_readers),
            encoder_backend=check_backend(environ.get("SEEDER_ENCODER_BACKEND", default.encoder_backend)),
            malloc=_one_of(environ.get("SEEDER_MALLOC") or default.malloc, "SEEDER_MALLOC", MALLOC_MODES,
                           ": fix or unset it"),
        )


VARIABLES: dict[str, str] = {f.metadata["env"]: f.name for f in fields(Settings)}
"""Each environment variable ``Settings`` reads, and its field."""


def _whole_number(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SeederError(f"{name} must be a whole number, not {raw!r}: fix or unset it") from None


def _size(environ: Mapping[str, str], name: str) -> str | None:
    raw = environ.get(name) or None
    if raw is not None and not re.fullmatch(r"[0-9]+[kmgKMG]?", raw):
        raise SeederError(f"{name} must be a size such as 256m or 1g, not {raw!r}: fix or unset it")
    return raw


def _at_least_one(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, str(default))
    try:
        value = int(raw)
    except ValueError:
        raise SeederError(f"{name} must be a whole number, not {raw!r}") from None
    if value < 1:
        raise SeederError(f"{name} must be at least 1, not {value}")
    return value


def check_khop(raw: str) -> str:
    """``raw`` as one of ``KHOP_ENGINES`` (any case, spaces around), else a one-line SeederError."""
    return _one_of(raw, "SEEDER_KHOP", KHOP_ENGINES)


def check_backend(raw: str) -> str:
    """``raw`` as one of ``ENCODER_BACKENDS`` (any case, spaces around), else a one-line SeederError."""
    return _one_of(raw, "SEEDER_ENCODER_BACKEND", ENCODER_BACKENDS)


def _one_of(raw: object, name: str, values: tuple[str, ...], hint: str = "") -> str:
    """``raw`` as one of ``values`` (any case, spaces around), else a one-line SeederError naming ``name``."""
    value = str(raw).strip().lower()
    if value not in values:
        raise SeederError(f"{name} must be one of {', '.join(values)}, not {raw!r}{hint}")
    return value


_CURRENT: tuple[tuple[str | None, ...], Settings] | None = None


def settings() -> Settings:
    """The ``Settings`` of the process environment now: read again only when one of its variables
    has changed since the last call (a bad value raises on every call)."""
    global _CURRENT
    key = tuple(os.environ.get(name) for name in VARIABLES)
    current = _CURRENT
    if current is None or current[0] != key:
        current = (key, Settings.from_env({n: v for n, v in zip(VARIABLES, key) if v is not None}))
        _CURRENT = current
    return current[1]
