"""Show and save an ``EvalResult``: rich tables, ``results.json``, ``results.md`` and STaRK predictions.

Files (all written atomically, so a reader never sees half a file):

* ``results.json`` — settings, question counts, every method's summary, per-hop / per-qtype
  breakdowns; with ``per_query=True`` also each query's metrics, latency and ranking
  (``per_query.<method>.ids`` / ``.scores``, aligned with ``queries.id``);
* ``results.md`` — the same tables in Markdown;
* ``predictions/<method>.json`` — ``{query_id: {node_id: score}}``: per query the ``pred_dict``
  STaRK's evaluator reads (JSON keys are strings: ``{int(k): v}`` turns them back); the order of
  the method's ranking is kept in the file;
* ``predictions/<method>.csv`` — ``query_id,pred_rank`` with ``pred_rank`` a JSON list of node ids
  in ranking order (the columns of STaRK's ``eval_results.csv``).
"""
from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from loaders.kg import atomic_write
from seeder_dgl.evaluation.evaluate import EvalResult

TABLE_METRICS = ("hit@1", "hit@5", "hit@20", "mrr", "recall@20", "hit@any", "recall@any", "size", "latency_ms")
"""Columns of the tables, when present in the result."""
GROUP_METRICS = ("hit@1", "hit@5", "mrr", "recall@20", "recall@any", "size")
_HEADERS = {"mrr": "MRR", "size": "size", "latency_ms": "ms/query"}
_SHORT = {"hit": "H", "recall": "R"}
CONSOLE_GROUP_LIMIT = 12
"""Breakdowns with more groups than this are only in the files (e.g. MetaQA's ~50 question types)."""


def _header(metric: str, short: bool = False) -> str:
    """'hit@1' -> 'Hit@1' (short: 'H@1', as the paper's tables); 'latency_ms' -> 'ms/query'."""
    if metric in _HEADERS:
        return "ms" if short and metric == "latency_ms" else _HEADERS[metric]
    name, _, k = metric.partition("@")
    return f"{_SHORT.get(name, name) if short else name.capitalize()}@{k}"


def _fmt(metric: str, value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if metric == "size":
        return f"{value:.1f}"
    if metric.startswith("latency"):
        return f"{value:.2f}"
    return f"{value:.3f}"


def table_metrics(result: EvalResult, wanted: Sequence[str] = TABLE_METRICS) -> list[str]:
    present = set(result.metrics) | {"latency_ms"}
    return [m for m in wanted if m in present]


def _title(result: EvalResult) -> str:
    meta = result.meta
    where = " ".join(str(x) for x in (meta.get("dataset"), meta.get("split")) if x)
    return (f"{where + ': ' if where else ''}{result.num_queries} queries, k={result.k}, "
            f"@any over the top {result.depth}")


# ---------------------------------------------------------------------------------------------
# Console
# ---------------------------------------------------------------------------------------------
def render(result: EvalResult, console=None) -> None:
    """Print the comparison table, then one table per breakdown (hops, qtype) that is short enough."""
    console = console or Console()
    metrics = table_metrics(result)
    table = Table(title=_title(result))
    table.add_column("method", no_wrap=True)
    for m in metrics:
        table.add_column(_header(m, short=True), justify="right")
    best = _best(result, metrics)
    for name, mr in result.methods.items():
        cells = []
        for m in metrics:
            text = _fmt(m, mr.summary.get(m, float("nan")))
            cells.append(f"[bold]{text}[/]" if best.get(m) == name else text)
        table.add_row(name + (" [red](failed)[/]" if mr.error else ""), *cells)
    console.print(table)
    for name, mr in result.methods.items():
        if mr.error:
            console.print(f"[red]{name} failed:[/] {mr.error}", highlight=False)
    for attr in _breakdowns(result):
        groups = _group_names(result, attr)
        if len(groups) > CONSOLE_GROUP_LIMIT:
            console.print(f"({len(groups)} {attr} groups: see results.md)")
            continue
        gm = [m for m in GROUP_METRICS if m in metrics]
        sub = Table(title=f"by {attr}")
        sub.add_column(attr)
        sub.add_column("queries", justify="right")
        sub.add_column("method", no_wrap=True)
        for m in gm:
            sub.add_column(_header(m, short=True), justify="right")
        for g in groups:
            for i, (name, mr) in enumerate(result.methods.items()):
                row = mr.groups.get(attr, {}).get(g)
                if row is None:
                    continue
                sub.add_row(g if i == 0 else "", str(int(row["num_queries"])) if i == 0 else "", name,
                            *[_fmt(m, row.get(m, float("nan"))) for m in gm],
                            end_section=i == len(result.methods) - 1)
        console.print(sub)


def _best(result: EvalResult, metrics: Sequence[str]) -> dict[str, str]:
    """metric -> method with the highest mean (quality metrics only)."""
    out = {}
    ok = {n: m for n, m in result.methods.items() if not m.error}
    for metric in metrics:
        if metric in ("size", "latency_ms") or not ok:
            continue
        out[metric] = max(ok, key=lambda n: ok[n].summary.get(metric, float("-inf")))
    return out


def _breakdowns(result: EvalResult) -> list[str]:
    names: list[str] = []
    for mr in result.methods.values():
        for attr in mr.groups:
            if attr not in names:
                names.append(attr)
    return names


def _group_names(result: EvalResult, attr: str) -> list[str]:
    names: list[str] = []
    for mr in result.methods.values():
        for g in mr.groups.get(attr, {}):
            if g not in names:
                names.append(g)
    return names


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------
def _clean(value):
    """JSON-safe: NaN/inf -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def to_dict(result: EvalResult, per_query: bool = False) -> dict:
    """Everything in ``results.json``."""
    out = {
        "k": result.k, "depth": result.depth, "num_queries": result.num_queries, "metrics": result.metrics,
        "meta": result.meta,
        "methods": {name: {"summary": mr.summary, "groups": mr.groups, "info": mr.info, "error": mr.error}
                    for name, mr in result.methods.items()},
    }
    if per_query:
        out["queries"] = {"id": result.query_ids, "hops": result.hops, "qtype": result.qtypes}
        out["per_query"] = {name: {"metrics": {m: v for m, v in mr.per_query.items()},
                                   "ids": mr.ids, "scores": mr.scores}
                            for name, mr in result.methods.items()}
    return _clean(out)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1) -> list[str]:
    def esc(s):
        return str(s).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" if i < right_from else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return lines


def to_markdown(result: EvalResult) -> str:
    metrics = table_metrics(result)
    meta = result.meta
    lines = [f"# Retrieval evaluation: {meta.get('dataset', '')} {meta.get('split', '')}".rstrip(), ""]
    if meta.get("command"):
        lines += [f"Command: `{meta['command']}`", ""]
    facts = [f"{result.num_queries} scored queries", f"k = {result.k}", f"@any over the top {result.depth}"]
    q = meta.get("questions") or {}
    if q.get("dropped_no_answers"):
        facts.append(f"{q['dropped_no_answers']} questions without a mapped answer left out")
    if q.get("unknown_names"):
        facts.append(f"{q['unknown_names']} answer/topic names not in the graph")
    lines += ["; ".join(facts) + ".", "",
              "Metrics follow STaRK: Recall@k divides by |A(q)|; MRR uses the whole ranking; "
              "ms/query is wall time of one retrieval call (query encoding excluded).", ""]
    rows = []
    for name, mr in result.methods.items():
        rows.append([name + (" (failed)" if mr.error else "")] + [_fmt(m, mr.summary.get(m, float("nan")))
                                                                   for m in metrics])
    lines += _md_table(["method"] + [_header(m) for m in metrics], rows) + [""]
    errors = [(n, mr.error) for n, mr in result.methods.items() if mr.error]
    for name, error in errors:
        lines.append(f"- {name} failed: {error}")
    if errors:
        lines.append("")
    notes = [(n, mr.info.get("note")) for n, mr in result.methods.items() if mr.info.get("note")]
    for name, note in notes:
        lines.append(f"- {name}: {note}")
    if notes:
        lines.append("")
    gm = [m for m in GROUP_METRICS if m in metrics]
    for attr in _breakdowns(result):
        lines += [f"## By {attr}", ""]
        rows = []
        for g in _group_names(result, attr):
            for name, mr in result.methods.items():
                row = mr.groups.get(attr, {}).get(g)
                if row is not None:
                    rows.append([g, str(int(row["num_queries"])), name] + [_fmt(m, row.get(m, float("nan")))
                                                                           for m in gm])
        lines += _md_table([attr, "queries", "method"] + [_header(m) for m in gm], rows, right_from=3) + [""]
    return "\n".join(lines)


def stark_predictions(result: EvalResult, method: str) -> dict[str, dict[str, float]]:
    """``{query_id: {node_id: score}}`` of one method (string keys, ranking order kept)."""
    mr = result.methods[method]
    out: dict[str, dict[str, float]] = {}
    for qid, ids, scores in zip(result.query_ids, mr.ids, mr.scores):
        pred: dict[str, float] = {}
        for node, score in zip(ids.tolist(), scores.tolist()):
            pred.setdefault(str(node), score if math.isfinite(score) else 0.0)
        out[str(int(qid))] = pred
    return out


def _file_name(method: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", method)


def _write_text(path: Path, text: str) -> None:
    with atomic_write(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    path.chmod(0o644)  # the temporary file was private (mkstemp); results are for everyone to read


def save(result: EvalResult, out_dir: str | Path, per_query: bool = False, predictions: bool = True) -> dict[str, Path]:
    """Write results.json, results.md and predictions/<method>.{json,csv}; returns the paths by kind."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "results.md"}
    _write_text(paths["json"], json.dumps(to_dict(result, per_query), indent=2, sort_keys=False) + "\n")
    _write_text(paths["markdown"], to_markdown(result) + "\n")
    if predictions:
        folder = out_dir / "predictions"
        for name, mr in result.methods.items():
            if mr.error:
                continue
            pred = stark_predictions(result, name)
            base = _file_name(name)
            _write_text(folder / f"{base}.json", json.dumps(pred) + "\n")
            buf = io.StringIO()
            writer = csv.writer(buf)
            writer.writerow(["query_id", "pred_rank"])
            for qid, ids in zip(result.query_ids, mr.ids):
                writer.writerow([qid, json.dumps(list(dict.fromkeys(ids.tolist())))])
            _write_text(folder / f"{base}.csv", buf.getvalue())
        paths["predictions"] = folder
    return paths
