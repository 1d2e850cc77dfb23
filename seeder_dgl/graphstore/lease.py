"""One writer per dataset: a lease held in Neo4j by the command that writes (ingest, adopt, drop,
upsert; and for the write of its record, ``tune`` and ``extract --refit-prior``).

A second writer on the same dataset is refused in one line instead of interleaving its batches
with the first's (two ingests at once wrote every relationship twice: each resumed from the
other's progress counter). The lease is a ``:SeederLease {name}`` node (unique on ``name``) with
its owner (host, pid and a random part), the command and an expiry that every committed batch
extends; the batches' progress statement is fenced by it, so a writer whose lease was taken over
cannot commit another batch. A lease left by a killed command is taken over at once when its
process is known to be gone (same host, pid not running), else when it lapses (``TTL_SECONDS``
without a batch).
"""
from __future__ import annotations

import os
import socket
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

from neo4j import Driver
from neo4j.exceptions import DriverError, Neo4jError

from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.connection import describe_neo4j_error
from seeder_dgl.graphstore.cypher import query
from seeder_dgl.graphstore.server import pid_alive

TTL_SECONDS = 600
"""A lease not extended for this long (no batch committed, no renewal) may be taken by another writer."""


class DatasetBusy(SeederError):
    """Another command is writing the same dataset."""


@dataclass(frozen=True)
class Lease:
    dataset: str
    owner: str
    database: str | None


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _gone(owner: str | None) -> bool:
    """Whether ``owner``'s process is known to have ended: it ran on this host under a pid that no
    longer runs (a lease from another host can only lapse)."""
    try:
        host, pid, _ = (owner or "").rsplit(":", 2)
        pid_number = int(pid)
    except ValueError:
        return False
    return host == socket.gethostname() and pid_number != os.getpid() and not pid_alive(pid_number)


def _run(driver: Driver, database: str | None, statement: str, what: str, **params):
    try:
        return driver.execute_query(query(statement), database_=database, **params).records
    except (Neo4jError, DriverError, OSError) as exc:
        raise SeederError(describe_neo4j_error(exc, what)) from exc


def acquire(driver: Driver, dataset: str, command: str, database: str | None = None) -> Lease:
    """The dataset's writer lease, or a one-line ``DatasetBusy`` naming who holds it."""
    # Every time (IF NOT EXISTS: a no-op when there): the last drop, perhaps by another process, removes it.
    _run(driver, database, "dataset/lease_constraint", "creating the lease constraint")
    owner = new_owner()
    row = _run(driver, database, "dataset/lease_acquire", "taking the dataset's writer lease", name=dataset,
               owner=owner, command=command, ttl=TTL_SECONDS, takeover=None)[0]
    if not row["free"] and _gone(row["held"]):
        row = _run(driver, database, "dataset/lease_acquire", "taking the dataset's writer lease", name=dataset,
                   owner=owner, command=command, ttl=TTL_SECONDS, takeover=row["held"])[0]
    if not row["free"]:
        host, pid = (str(row["held"]).rsplit(":", 2) + ["?", "?"])[:2]
        raise DatasetBusy(f"dataset {dataset!r} is being written by another command (`{row['command']}`, pid {pid} "
                          f"on {host}, since {row['since']}): wait for it to finish; a lease left by a command "
                          f"that died elsewhere lapses {TTL_SECONDS // 60} minutes after its last write")
    return Lease(dataset, owner, database)


def renew(driver: Driver, lease: Lease) -> None:
    """Extend the lease during a long step; a one-line error when it was taken over meanwhile."""
    if not _run(driver, lease.database, "dataset/lease_renew", "renewing the dataset's writer lease",
                name=lease.dataset, owner=lease.owner, ttl=TTL_SECONDS):
        raise DatasetBusy(f"the writer lease of {lease.dataset!r} was taken over by another command: "
                          "what was committed is kept; run the command again once the other one is done")


def release(driver: Driver, lease: Lease) -> None:
    try:
        driver.execute_query(query("dataset/lease_release"), name=lease.dataset, owner=lease.owner,
                             database_=lease.database)
    except (Neo4jError, DriverError, OSError):
        pass  # the lease lapses by itself; the command's own error, if any, is the one to report


def cleanup(driver: Driver, database: str | None = None) -> None:
    """After the last dataset's drop: the lease constraint goes too, so a database seeder-dgl no
    longer uses is left as it was before (the next writer creates it again)."""
    try:
        row = driver.execute_query(query("dataset/lease_leftovers"), database_=database).records[0]
        if not row["datasets"] and not row["leases"]:
            driver.execute_query(query("dataset/lease_drop_constraint"), database_=database)
    except (Neo4jError, DriverError, OSError):
        pass  # a constraint left behind costs nothing; the drop itself succeeded


@contextmanager
def held(driver: Driver, dataset: str, command: str, database: str | None = None) -> Iterator[Lease]:
    """``with held(driver, name, "ingest") as lease:`` the lease for the block, released after it."""
    lease = acquire(driver, dataset, command, database)
    try:
        yield lease
    finally:
        release(driver, lease)


def check_free(driver: Driver, dataset: str, command: str, database: str | None = None) -> None:
    """A one-line ``DatasetBusy`` now, before minutes of work, when another command writes the dataset."""
    with held(driver, dataset, command, database):
        pass


def write_record(driver: Driver, dataset: str, command: str, statement: str, what: str,
                 database: str | None = None, **params) -> None:
    """Run one statement that writes the dataset's record (``tune``'s settings, the fitted linker
    and prior) under the dataset's writer lease: never while an ingest, adopt, upsert or drop of the
    same dataset writes (a one-line ``DatasetBusy``, nothing written)."""
    with held(driver, dataset, command, database):
        _run(driver, database, statement, what, name=dataset, **params)
