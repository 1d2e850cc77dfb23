"""`seeder-dgl serve` end to end against the real Neo4j: the command starts on a small graph of its
own, answers over HTTP with the JSON of `query --format json`, keeps questions out of the
embedding cache on disk, and its page works in a real headless Chromium (driven through
chromedriver): a question typed in, the ranked nodes listed, the subgraph drawn, a screenshot saved.

The screenshot goes to ``$SEEDER_SCREENSHOT_DIR`` when set (to look at it), else the test's tmp dir.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from seeder_dgl.cli import app
from tests.helpers.own_graph import OwnGraph, company_graph, ingested_graph
from tests.helpers.processes import free_port, stop

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
START_TIMEOUT_S = 240
INSTALL_HINT = ("the page test needs Chromium and its driver: `apt-get install -y chromium chromium-driver` "
                "(Debian; `make system-deps` installs them when missing), then run it again")
runner = CliRunner()


@dataclass
class Server:
    url: str
    dataset: str
    graph: OwnGraph
    embeddings: Path
    """The embedding cache on disk the server uses (the ingest filled it with node texts)."""
    env: dict


def call(url: str, body=None) -> tuple[int, object]:
    """(status, JSON) of a GET, or of a POST when ``body`` is given."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _wait_until_up(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"`seeder-dgl serve` exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if call(url + "health")[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.5)
    pytest.fail(f"`seeder-dgl serve` did not answer within {START_TIMEOUT_S} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def server(neo4j_target, tmp_path_factory):
    """A small company graph ingested under a fresh name, served by the real command in a process
    of its own; stopped and dropped afterwards."""
    root = tmp_path_factory.mktemp("serve")
    name = "serve" + uuid.uuid4().hex[:8]
    graph = company_graph(seed=4, people=24)
    # node tables: typed nodes, coloured by type on the page
    with ingested_graph(neo4j_target, root, name, graph, "jsonl") as env:
        port = free_port()
        log = root / "serve.log"
        with open(log, "w") as out:
            process = subprocess.Popen([sys.executable, "-m", "seeder_dgl.cli", "serve", name, "--port", str(port)],
                                       stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
        try:
            url = f"http://127.0.0.1:{port}/"
            _wait_until_up(url, process, log)
            yield Server(url, name, graph, root / "cache" / "embeddings", env)
        finally:
            stop(process)


def _employee(graph: OwnGraph) -> tuple[str, str]:
    person = sorted(h for h, r, _ in graph.triples if r == "works at")[0]
    return person, next(t for h, r, t in graph.triples if h == person and r == "works at")


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_http_answers_with_the_json_of_query_format_json(server, monkeypatch):
    person, employer = _employee(server.graph)
    question = f"Where does {person} work?"
    status, body = call(server.url + "retrieve", {"question": question, "k": 5, "method": "khop",
                                                  "dataset": server.dataset})
    assert status == 200, body
    assert employer in [n["name"] for n in body["nodes"]] and len(body["nodes"]) == 5
    assert any(n["seed"] for n in body["nodes"])  # the person named in the question is a seed

    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    printed = runner.invoke(app, ["query", server.dataset, question, "--method", "khop", "--k", "5",
                                  "--format", "json"])
    assert printed.exit_code == 0, printed.output
    expected = json.loads(printed.output)
    assert set(body) == set(expected) and body["seconds"] > 0
    body.pop("seconds"), expected.pop("seconds")
    assert body == expected


def test_batches_errors_datasets_and_no_question_on_disk(server):
    before = _snapshot(server.embeddings)
    assert any(name.endswith(".npz") for name in before)  # the ingest's node embeddings are there

    questions = [f"Which companies are headquartered in {city}?" for city in ("Lisbon", "Osaka", "Lyon")]
    status, body = call(server.url + "retrieve", {"questions": questions, "k": 3, "method": "dense"})
    assert status == 200 and [r["question"] for r in body] == questions
    assert all(len(r["nodes"]) == 3 and r["method"] == "dense" for r in body)

    status, body = call(server.url + "retrieve", {"question": "  ", "dataset": server.dataset})
    assert (status, body) == (400, {"error": "the question is empty: ask something"})
    status, body = call(server.url + "retrieve", {"question": "Where is Lisbon?", "method": "seeder"})
    assert status == 400 and "no trained checkpoint" in body["error"]  # nothing was trained here
    status, body = call(server.url + "retrieve", {"question": "Where is Lisbon?", "k": -1})
    assert status == 400 and body["error"].startswith("k:")

    status, body = call(server.url + "datasets")
    (described,) = body["datasets"]
    assert status == 200 and body["default"] == server.dataset == described["name"]
    assert described["nodes"] == len(server.graph.nodes) and described["default_method"] == "khop"
    assert described["methods"]["seeder"]["available"] is False
    assert all(described["methods"][m] == {"available": True} for m in ("dense", "khop", "ppr"))
    assert call(server.url + "health") == (200, {"status": "ok", "version": "0.1.0", "datasets": [server.dataset]})

    assert _snapshot(server.embeddings) == before  # questions stayed in memory


def _chromium():
    """A headless Chromium through Debian's chromedriver, or a skip (a failure in CI) that says
    what to install."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    missing = [name for name, found in (("chromium", binary), ("chromedriver", shutil.which("chromedriver")))
               if not found]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    if missing:
        message = f"{' and '.join(missing)} not found: {INSTALL_HINT}"
        if IN_CI:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,900"):
        options.add_argument(argument)
    try:
        return webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    except Exception as exc:
        pytest.fail(f"Chromium did not start ({type(exc).__name__}: {str(exc).strip()[:300]}): {INSTALL_HINT}",
                    pytrace=False)


def test_the_page_in_headless_chromium(server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    person, employer = _employee(server.graph)
    browser = _chromium()
    try:
        wait = WebDriverWait(browser, 60)
        browser.get(server.url)
        wait.until(lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-state") in ("ready", "error"))
        assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "ready", \
            browser.find_element(By.ID, "status").text
        assert Select(browser.find_element(By.ID, "dataset")).first_selected_option.get_attribute("value") == \
            server.dataset
        methods = Select(browser.find_element(By.ID, "method"))
        assert methods.first_selected_option.get_attribute("value") == "khop"  # the dataset's default
        seeder = next(o for o in methods.options if o.get_attribute("value") == "seeder")
        assert not seeder.is_enabled() and "checkpoint" in seeder.get_attribute("title")

        browser.find_element(By.ID, "question").send_keys(f"Where does {person} work?")
        k = browser.find_element(By.ID, "k")
        k.clear()
        k.send_keys("8")
        browser.find_element(By.ID, "submit").click()
        wait.until(lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-state") in ("done", "error"))
        assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "done", \
            browser.find_element(By.ID, "status").text

        ranked = [li.find_element(By.CLASS_NAME, "name").text for li in
                  browser.find_elements(By.CSS_SELECTOR, "#ranked li")]
        assert len(ranked) == 8 and employer in ranked
        drawn = browser.find_elements(By.CSS_SELECTOR, "#graph g.node")
        assert sorted(g.get_attribute("data-name") for g in drawn) == sorted(ranked)  # one per node, by id
        assert len({g.get_attribute("data-id") for g in drawn}) == len(ranked)
        inside = browser.execute_script(  # laid out: every node's centre a number within the viewBox
            "const box = arguments[0].viewBox.baseVal;"
            "return [...arguments[0].querySelectorAll('g.node')].map((g) => {"
            "  const m = g.transform.baseVal.consolidate().matrix;"
            "  return m.e >= box.x && m.e <= box.x + box.width && m.f >= box.y && m.f <= box.y + box.height; });",
            browser.find_element(By.ID, "graph"))
        assert len(inside) == len(ranked) and all(inside), inside
        assert browser.find_elements(By.CSS_SELECTOR, "#graph path.edge")
        assert "works_at" in [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#graph text.edge-label")]
        seeds = browser.find_elements(By.CSS_SELECTOR, "#ranked .seed-badge")
        assert seeds and len(browser.find_elements(By.CSS_SELECTOR, "#graph circle.seed-ring")) == len(seeds)
        legend = browser.find_element(By.ID, "legend").text
        assert "person" in legend and "company" in legend and "seed" in legend
        assert f"{person} -[works_at]-> {employer}" in browser.find_element(By.ID, "triples").text
        assert "q=Where" in browser.current_url  # the address keeps the question

        folder = Path(os.environ.get("SEEDER_SCREENSHOT_DIR") or tmp_path)
        folder.mkdir(parents=True, exist_ok=True)
        shot = folder / "serve-page.png"
        assert browser.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000

        # An address with a question asks it at once (links can be shared).
        browser.get(server.url + "?q=Which+companies+are+in+Lisbon&method=dense&k=3")
        wait.until(lambda b: b.find_element(By.TAG_NAME, "body").get_attribute("data-state") in ("done", "error"))
        assert len(browser.find_elements(By.CSS_SELECTOR, "#ranked li")) == 3
        assert Select(browser.find_element(By.ID, "method")).first_selected_option.get_attribute("value") == "dense"
        assert browser.find_element(By.ID, "question").get_attribute("value") == "Which companies are in Lisbon"
    finally:
        browser.quit()
