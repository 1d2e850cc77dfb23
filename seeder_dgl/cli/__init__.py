"""The `seeder-dgl` command line.

Every command that fails for a reason the user can fix prints one line (``error: ...``) and
exits 1; tracebacks are for bugs only.

Each command imports what it runs inside its own body: `seeder-dgl --help` and `neo4j status`
answer in a fraction of a second instead of loading torch, sentence-transformers and the driver.
Elsewhere imports stand at the top of their module, except optional extras and slow libraries
(`tests/unit/test_local_imports.py` lists which).
"""
from __future__ import annotations

from seeder_dgl.allocator import configure_allocator
from seeder_dgl.cli import graph_commands, neo4j_commands, training_commands, use_commands  # noqa: F401  (they register)
from seeder_dgl.cli.base import app, err_console, exit_after_interrupt, one_line_errors
from seeder_dgl.errors import SeederError

__all__ = ["app", "exit_after_interrupt", "main", "one_line_errors"]


def main() -> None:  # pragma: no cover - console entry point
    try:
        configure_allocator()  # before torch and NumPy allocate: every command's process
    except SeederError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(1) from None
    exit_after_interrupt(app)


if __name__ == "__main__":  # pragma: no cover
    main()
