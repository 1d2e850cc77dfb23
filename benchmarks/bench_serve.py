"""`seeder-dgl serve` over HTTP: end-to-end latency of POST /retrieve beside the retrieval's own
time (the answer's ``seconds``) on the same requests, then 8 concurrent clients for 60 s.

    python benchmarks/bench_serve.py                       # starts `seeder-dgl serve metaqa` itself
    python benchmarks/bench_serve.py --url http://127.0.0.1:8000/   # a server already running

The end-to-end time is what a client on 127.0.0.1 waits for: HTTP, JSON, embedding the question
(not in ``seconds``), seeding, K-hop in Cypher and ranking. Questions are MetaQA validation
questions, each asked once in the sequential pass, so every one is embedded afresh; the
concurrent clients cycle through the same questions, so there most embeddings come from the
server's in-memory question cache. Writes benchmarks/results/serve-<dataset>.{json,md}.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import cpu_probe, machine, percentile, probe_line, write_result  # noqa: E402


class Client:
    """One keep-alive HTTP connection, as a client library would hold it."""

    def __init__(self, url: str, timeout: float = 120.0):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.timeout = timeout
        self.connection: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, object]:
        if self.connection is None:
            self.connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        try:
            self.connection.request(method, self.prefix + path, body=payload, headers=headers)
            response = self.connection.getresponse()
            return response.status, json.loads(response.read())
        except BaseException:
            self.close()  # a broken connection is not reused
            raise

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def start_server(dataset: str, method: str, profile: str | None, log_dir: Path) -> tuple[subprocess.Popen, str, Path]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = log_dir / "serve.log"
    command = [sys.executable, "-m", "seeder_dgl.cli", "serve", dataset, "--port", str(port), "--method", method]
    if profile:
        command += ["--profile", profile]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    url = f"http://127.0.0.1:{port}/"
    client = Client(url, timeout=5)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if client.request("GET", "/health")[0] == 200:
                return process, url, log
        except OSError:
            pass
        time.sleep(0.5)
    process.terminate()
    raise SystemExit(f"the server did not answer within 600 s:\n{log.read_text()[-3000:]}")


def metaqa_questions(count: int, seed: int) -> list[str]:
    from loaders.metaqa import load_metaqa

    queries = load_metaqa()[1].split("val")
    rng = np.random.default_rng(seed)
    return [queries[i].text for i in rng.choice(len(queries), size=min(count, len(queries)), replace=False)]


def timed(client: Client, body: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    status, answer = client.request("POST", "/retrieve", body)
    elapsed = (time.perf_counter() - start) * 1000
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {answer}")
    return elapsed, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="metaqa")
    parser.add_argument("--method", default="seeder")
    parser.add_argument("--profile", default=None, help="the server's retrieval profile [default: the dataset's]")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--queries", type=int, default=300, help="distinct questions of the sequential pass")
    parser.add_argument("--warmup", type=int, default=20, help="untimed requests first (other questions)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--url", default=None, help="a running server; default: start `seeder-dgl serve` here")
    parser.add_argument("--tag", default=None, help="suffix of the results file, to keep several runs")
    args = parser.parse_args()
    if args.dataset != "metaqa":
        raise SystemExit("questions are MetaQA's validation questions: --dataset metaqa (or a copy ingested "
                         "from the same files under another name)")
    probe_before, load_before = cpu_probe(), os.getloadavg()[0]
    questions = metaqa_questions(args.queries + args.warmup, seed=0)
    warmup, questions = questions[:args.warmup], questions[args.warmup:]
    process = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.url:
            url = args.url
        else:
            started = time.perf_counter()
            process, url, _ = start_server(args.dataset, args.method, args.profile, Path(tmp))
            print(f"server up after {time.perf_counter() - started:.1f} s (loading and warm-up)", flush=True)
        try:
            result = run(args, url, warmup, questions)
        finally:
            if process is not None:
                process.terminate()
                process.wait(timeout=60)
    probe_after, load_after = cpu_probe(), os.getloadavg()[0]
    result.update({"cpu_probe_ms": {"before": probe_before, "after": probe_after}, "machine": machine(),
                   # The probe times one core; the load average also shows other work sharing the machine.
                   "load_average_1min": {"before": load_before, "after": load_after}})
    write(args, result, probe_before, probe_after)


def run(args, url: str, warmup: list[str], questions: list[str]) -> dict:
    client = Client(url)
    status, described = client.request("GET", "/datasets")
    served = next(d for d in described["datasets"] if d["name"] == args.dataset)
    body = {"k": args.k, "method": args.method, "dataset": args.dataset}
    for question in warmup:
        timed(client, {**body, "question": question})

    def one_pass() -> tuple[list[float], list[float]]:
        """Each question once, one request at a time: (end-to-end ms, the answer's retrieval ms)."""
        wall, own = [], []
        for question in questions:
            elapsed, answer = timed(client, {**body, "question": question})
            wall.append(elapsed)
            own.append(answer["seconds"] * 1000)
        return wall, own

    # Sequential: one client, one request at a time, each question new to the server.
    http_ms, retrieval_ms = one_pass()
    overhead = np.asarray(http_ms) - np.asarray(retrieval_ms)
    # The same questions again: their embeddings now come from the server's question cache, so
    # the difference left is what serving adds (HTTP, JSON, validation), nothing of the model.
    again_ms, again_retrieval_ms = one_pass()
    serving = np.asarray(again_ms) - np.asarray(again_retrieval_ms)
    client.close()

    # Concurrent: each client its own connection, cycling through the questions from its own offset.
    latencies: list[float] = []
    server_ms: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + args.seconds

    def worker(offset: int) -> None:
        own = Client(url)
        i = offset
        while time.perf_counter() < stop_at:
            try:
                elapsed, answer = timed(own, {**body, "question": questions[i % len(questions)]})
            except Exception as exc:  # counted, not raised: the run reports them
                with lock:
                    errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            else:
                with lock:
                    latencies.append(elapsed)
                    server_ms.append(answer["seconds"] * 1000)
            i += 7
        own.close()

    threads = [threading.Thread(target=worker, args=(c * len(questions) // args.clients,))
               for c in range(args.clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return {
        "dataset": args.dataset, "method": args.method, "profile": served.get("profile"), "k": args.k,
        "url": url, "queries": len(questions), "warmup_requests": len(warmup),
        "sequential": {
            "http_ms": {"p50": percentile(http_ms, 50), "p95": percentile(http_ms, 95)},
            "retrieval_ms": {"p50": percentile(retrieval_ms, 50), "p95": percentile(retrieval_ms, 95)},
            "http_minus_retrieval_ms": {"p50": percentile(overhead, 50), "p95": percentile(overhead, 95)},
        },
        "repeated": {
            "http_ms": {"p50": percentile(again_ms, 50), "p95": percentile(again_ms, 95)},
            "retrieval_ms": {"p50": percentile(again_retrieval_ms, 50), "p95": percentile(again_retrieval_ms, 95)},
            "http_minus_retrieval_ms": {"p50": percentile(serving, 50), "p95": percentile(serving, 95)},
        },
        "concurrency": {"clients": args.clients, "seconds": round(wall, 1), "completed": len(latencies),
                        "throughput_qps": len(latencies) / wall, "p50_ms": percentile(latencies, 50),
                        "p95_ms": percentile(latencies, 95), "retrieval_p50_ms": percentile(server_ms, 50),
                        "errors": len(errors), "first_error": errors[:1]},
    }


def write(args, result: dict, probe_before: float, probe_after: float) -> None:
    seq, rep, cc = result["sequential"], result["repeated"], result["concurrency"]
    md = "\n".join([
        f"# `seeder-dgl serve` on {args.dataset}: HTTP against the retrieval's own time",
        "",
        f"Machine: {result['machine']['cpu']}, {result['machine']['cores']} cores; client, server and Neo4j on the "
        f"same machine, over 127.0.0.1. Method {args.method} (profile {result['profile']}), k = {args.k}. "
        f"Command: `python benchmarks/bench_serve.py" + (f" --method {args.method}" if args.method != "seeder" else "")
        + "`.",
        "",
        f"Sequential: one client with a keep-alive connection, {result['queries']} MetaQA validation questions, each "
        f"asked once (after {result['warmup_requests']} untimed requests).",
        "",
        "| per request | p50 ms | p95 ms |", "|---|---|---|",
        f"| end to end over HTTP (the client's wait) | {seq['http_ms']['p50']:.1f} | {seq['http_ms']['p95']:.1f} |",
        f"| retrieval itself (the answer's `seconds`: seeding, K-hop, ranking) | {seq['retrieval_ms']['p50']:.1f} | "
        f"{seq['retrieval_ms']['p95']:.1f} |",
        f"| difference, per request (embedding the question, HTTP, JSON) | "
        f"{seq['http_minus_retrieval_ms']['p50']:.1f} | {seq['http_minus_retrieval_ms']['p95']:.1f} |",
        "",
        "The same questions asked again, in the same order (their embeddings now come from the server's question "
        "cache, so the difference is what serving adds: HTTP, JSON, validation):",
        "",
        "| per request | p50 ms | p95 ms |", "|---|---|---|",
        f"| end to end over HTTP | {rep['http_ms']['p50']:.1f} | {rep['http_ms']['p95']:.1f} |",
        f"| retrieval itself | {rep['retrieval_ms']['p50']:.1f} | {rep['retrieval_ms']['p95']:.1f} |",
        f"| difference, per request | {rep['http_minus_retrieval_ms']['p50']:.1f} | "
        f"{rep['http_minus_retrieval_ms']['p95']:.1f} |",
        "",
        f"Concurrency: {cc['clients']} clients, each its own connection, for {cc['seconds']} s, cycling through the "
        f"same questions (repeated ones are embedded from the server's question cache): {cc['completed']} requests, "
        f"{cc['throughput_qps']:.1f} requests/s, end to end p50 {cc['p50_ms']:.1f} ms, p95 {cc['p95_ms']:.1f} ms "
        f"(retrieval p50 {cc['retrieval_p50_ms']:.1f} ms), {cc['errors']} errors.",
        "",
        probe_line(probe_before, probe_after) + f" Load average (1 min): {result['load_average_1min']['before']:.1f} "
        f"before, {result['load_average_1min']['after']:.1f} after.",
    ])
    print(md)
    write_result(f"serve-{args.dataset}" + (f"-{args.tag}" if args.tag else ""), result, md)


if __name__ == "__main__":
    main()
