"""Neo4j versions: the 5.26 LTS line and the calendar line (2025.x/2026.x), parsed and checked.

Neo4j numbered releases 5.x until 5.26 (LTS, supported to 2028); from 2025.01 releases are
numbered by year and month and need Java 21. A calendar version compares above every 5.x.
"""
from __future__ import annotations

import re

from seeder_dgl.errors import SeederError

NEO4J_VERSION = "5.26.30"
"""The default: the 5.26 LTS line (supported to 2028), the last that runs on Java 17."""
NEO4J_CALENDAR_VERSION = "2026.08.1"
"""The newest calendar release that Maven Central serves here, tested by CI's compatibility lane."""
VERSION_ALIASES = {"lts": NEO4J_VERSION, "5.26": NEO4J_VERSION, "calendar": NEO4J_CALENDAR_VERSION,
                   "latest": NEO4J_CALENDAR_VERSION}


class Neo4jVersionError(SeederError):
    """A Neo4j version seeder-dgl cannot run or does not support."""


def parse_version(text: str) -> tuple[int, ...]:
    """``'5.26.30'`` -> (5, 26, 30); ``'2026.08.1'`` -> (2026, 8, 1); a suffix such as ``-aura`` or
    ``-SNAPSHOT`` is ignored. Calendar versions compare above every 5.x (2025 > 5)."""
    match = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not match:
        raise ValueError(f"not a Neo4j version: {text!r}")
    return tuple(int(part) for part in match.groups(default="0"))


def is_calendar_version(version: str) -> bool:
    """Neo4j's calendar line (2025.01 on) numbers releases by year; it needs Java 21."""
    return parse_version(version)[0] >= 2025


def required_java(version: str) -> int:
    return 21 if is_calendar_version(version) else 17


def check_version(text: str) -> str:
    """A version the local server can run: an alias (``lts``, ``calendar``) or ``5.26.x`` / ``YYYY.MM.x``."""
    raw = (text or "").strip()
    version = VERSION_ALIASES.get(raw.lower(), raw)
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise Neo4jVersionError(f"Neo4j version {text!r} is not of the form 5.26.30 or 2026.08.1 "
                                f"(or lts, calendar): use one of those")
    parsed = parse_version(version)
    if parsed < (5, 26, 0):
        raise Neo4jVersionError(f"Neo4j {version} is older than 5.26, which seeder-dgl needs: use "
                                f"{NEO4J_VERSION} or {NEO4J_CALENDAR_VERSION}")
    return version


def version_supported(text: str) -> bool:
    """Whether a server reporting version ``text`` (``dbms.components()``) runs seeder-dgl's statements:
    5.26 or any calendar release (``2025.01.0``, ``2026.08.1``, ``2026.08.1-aura``)."""
    try:
        return parse_version(text) >= (5, 26, 0)
    except ValueError:
        return False
