"""What every command shares: the application, its consoles, one-line errors and option helpers."""
from __future__ import annotations

import functools
import os
import sys
from typing import Annotated, Callable, Optional

import typer
from rich.console import Console

from seeder_dgl.errors import SeederError, raised_from

app = typer.Typer(
    name="seeder-dgl",
    help="SeedER retrieval on knowledge graphs kept in Neo4j: ingest, extract, train, query, evaluate.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
neo4j_app = typer.Typer(help="Manage the project's local Neo4j Community server (5.26 LTS or the calendar line).",
                        no_args_is_help=True)
app.add_typer(neo4j_app, name="neo4j")

console = Console()
err_console = Console(stderr=True)


INTERRUPTED_HINTS = {
    # A new `train` without --resume starts the run over; --resume continues from last.pt.
    "train": "run it again with --resume to continue after the last finished epoch",
}
"""What to do after Ctrl-C, for commands where running the same command again does not continue."""


def one_line_errors(func: Callable) -> Callable:
    """Turn the project's user-facing errors into one red line and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except SeederError as exc:
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        except Exception as exc:
            if raised_from(exc, KeyboardInterrupt):  # Ctrl-C in the driver can surface as its cleanup's error
                err_console.print(f"[yellow]interrupted[/]: what was committed to Neo4j or disk is kept; "
                                  f"{INTERRUPTED_HINTS.get(func.__name__, 'run the same command again to continue')}",
                                  soft_wrap=True)
                raise typer.Exit(130)
            # A driver error no layer below turned into a SeederError (a statement the command runs
            # itself): the server's reason, on one line, never the driver's traceback.
            if not type(exc).__module__.startswith("neo4j."):
                raise
            from seeder_dgl.graphstore.connection import describe_neo4j_error

            err_console.print(f"[bold red]error:[/] {describe_neo4j_error(exc, 'Neo4j')}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(1)
        except KeyboardInterrupt:
            hint = INTERRUPTED_HINTS.get(func.__name__, "run the same command again to continue")
            err_console.print(f"[yellow]interrupted[/]: what was committed to Neo4j or disk is kept; {hint}",
                              soft_wrap=True)
            raise typer.Exit(130)

    return wrapper


# ---- shared options: the retrieval settings `extract` and `query` take ----------------------------
SeedsOption = Annotated[Optional[int], typer.Option(help="k0 seeds per question \\[default: the profile's].")]
BudgetsOption = Annotated[Optional[str], typer.Option(
    help="Nodes K-hop adds per hop, comma-separated, e.g. 50,97 \\[default: the profile's].")]
ProfileOption = Annotated[Optional[str], typer.Option(
    help="Retrieval settings: paper (the paper's: dense seeds, k0=3, B=150), or a dataset's own (MetaQA: deep, a "
         "full-text seed, 3 hops, B=500) \\[default: the dataset's best: MetaQA deep, others paper].")]
SeedingOption = Annotated[Optional[str], typer.Option(help="dense, fulltext or hybrid \\[default: the profile's].")]


# ---- shared option helpers ---------------------------------------------------------------------
def parse_budgets(text: str | None) -> tuple[int, ...] | None:
    """``--budgets``, checked; None when not given (the profile's, or a trained retriever's)."""
    from seeder_dgl.validation import check_budgets

    return check_budgets(text) if text else None


def query_encoder(graph):
    """The encoder the dataset was ingested with: query and node embeddings must share a space."""
    from seeder_dgl.embeddings import dataset_encoder

    return dataset_encoder(graph.info.model)


def exit_after_interrupt(command: Callable[[], object]) -> None:
    """Run ``command`` as the process's last act; after Ctrl-C (exit code 130, "interrupted" already
    printed) flush the output and leave without the interpreter's teardown.

    A backward pass cut off by Ctrl-C (training, or the relation prior's fit in ``extract``) leaves
    autograd nodes in a thread-local queue; some hold tensors made with ``torch.from_numpy``, whose
    release needs the GIL, which an exiting interpreter no longer hands out: with torch 2.2 the
    process hung at exit about once in twenty Ctrl-Cs. Everything a command keeps is committed or
    written atomically before this point."""
    try:
        command()
    except SystemExit as exc:
        if exc.code == 130:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        raise
