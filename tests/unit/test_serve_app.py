"""The HTTP API of `seeder-dgl serve` with stand-in retrievers (no Neo4j, no model): answers, one
batch per request, status codes and one-line JSON errors, warm-up, the page and its packaged files."""
from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from neo4j.exceptions import ServiceUnavailable

from seeder_dgl.api import METHODS, RetrievedNode, Retrieval
from seeder_dgl.errors import SeederError
from seeder_dgl.graphstore.connection import Neo4jUnavailable
from seeder_dgl.graphstore.live import LiveGraphError
from seeder_dgl.serving import app as serving
from seeder_dgl.serving.app import WARM_UP_QUESTION, check_address, create_app
from seeder_dgl.validation import check_k, check_question

REPO = Path(__file__).resolve().parents[2]


class FakeDriver:
    def __init__(self):
        self.up = True

    def verify_connectivity(self):
        if not self.up:
            raise ServiceUnavailable("connection refused")


class FakeRetriever:
    """What the app uses of a Retriever: ``dataset``, ``profile``, ``driver``, ``graph.info``,
    ``policy`` (raises without a checkpoint), ``retrieve_many`` (checks like the real one) and
    ``aretrieve_many``."""

    def __init__(self, dataset: str = "toy", checkpoint: bool = True, driver: FakeDriver | None = None):
        self.dataset = dataset
        self.profile = "paper"
        self.driver = driver or FakeDriver()
        self.graph = SimpleNamespace(info=SimpleNamespace(num_nodes=4, num_relationships=3, model="fake-model"))
        self.checkpoint = checkpoint
        self.calls: list[tuple[list[str], int, str]] = []
        self.fail: BaseException | None = None

    @property
    def policy(self):
        if not self.checkpoint:
            raise SeederError(f"no trained checkpoint at /srv/seeder/runs/{self.dataset}/full/best.pt: run "
                              "`seeder-dgl train`")
        return object()

    def retrieve_many(self, questions, k=20, method=None):
        k = check_k(k)
        questions = [check_question(q) for q in questions]
        self.calls.append((questions, k, method))
        if self.fail is not None:
            raise self.fail
        nodes = [RetrievedNode(1, "person", "Ada Okafor", 0.9, True), RetrievedNode(2, "company", "Acme", 0.5)][:k]
        return [Retrieval(q, method, nodes, 0.0123, 7, [(1, "Ada Okafor", "works at", 2, "Acme")]) for q in questions]

    async def aretrieve_many(self, questions, k=20, method=None):
        return self.retrieve_many(questions, k=k, method=method)


@pytest.fixture
def toy():
    return FakeRetriever("toy")


@pytest.fixture
def client(toy):
    with TestClient(create_app([toy, FakeRetriever("untrained", checkpoint=False)])) as c:
        toy.calls.clear()  # forget the warm-up
        yield c


def post(client, body):
    return client.post("/retrieve", json=body)


def test_one_question_answers_with_the_json_of_query_format_json(client, toy):
    response = post(client, {"question": "Where does Ada work?", "k": 2})
    assert response.status_code == 200
    body = response.json()
    expected = toy.retrieve_many(["Where does Ada work?"], k=2, method="seeder")[0].to_dict()
    assert body == expected
    assert body["nodes"][0] == {"id": 1, "type": "person", "name": "Ada Okafor", "score": 0.9, "seed": True, "text": "", "key": None}
    assert body["nodes"][1]["seed"] is False
    assert toy.calls[0] == (["Where does Ada work?"], 2, "seeder")  # the dataset's default method


def test_several_questions_are_one_batch_and_answer_as_a_list(client, toy):
    response = post(client, {"questions": ["q one", "q two", "q three"], "k": 1, "method": "khop"})
    assert response.status_code == 200
    body = response.json()
    assert [r["question"] for r in body] == ["q one", "q two", "q three"]
    assert all(len(r["nodes"]) == 1 and r["method"] == "khop" for r in body)
    assert toy.calls == [(["q one", "q two", "q three"], 1, "khop")]


def test_the_dataset_is_chosen_by_name_and_its_default_method_applies(client):
    response = post(client, {"question": "q", "dataset": "untrained"})
    assert response.status_code == 200 and response.json()["method"] == "khop"  # no checkpoint: K-hop


@pytest.mark.parametrize("body,message", [
    ({"question": "   "}, "the question is empty"),
    ({"questions": ["fine", ""]}, "the question is empty"),
    ({"question": "q", "k": 0}, "k: .*greater than or equal to 1"),
    ({"question": "q", "k": "5"}, "k: .*valid integer"),
    ({"question": "q", "k": True}, "k: .*valid integer"),
    ({"question": "q", "k": 10**9}, "k: .*less than or equal"),
    ({"question": "q", "method": "magic"}, "unknown method 'magic': choose one of seeder, dense, khop, ppr"),
    ({"question": "q", "dataset": "nowhere"}, "dataset 'nowhere' is not served here: choose one of toy, untrained"),
    ({"question": "q", "dataset": "untrained", "method": "seeder"},
     "method 'seeder' is not available for untrained: no trained"),
    ({"question": "q", "questions": ["q"]}, "not both"),
    ({"k": 3}, "not neither"),
    ({"questions": []}, "empty list"),
    ({"questions": ["q"] * 65}, "questions: .*at most 64"),
    ({"question": "q", "qestion": "typo"}, "unknown field 'qestion'"),
    ({"question": 42}, "question: .*valid string"),
    ({"question": "who is " + "x" * 300}, "a word of 300 characters"),
    ({"question": "why " * 30_000}, "ask in at most 100,000"),
])
def test_bad_requests_are_400_with_one_line(client, toy, body, message):
    response = post(client, body)
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"}
    error = response.json()["error"]
    assert re.search(message, error) and "\n" not in error
    assert toy.calls == []  # nothing was retrieved


def test_a_body_that_is_not_json_is_400(client):
    for content, message in ((b"{not json", "not valid JSON"), (b"", "send a JSON body")):
        response = client.post("/retrieve", content=content, headers={"Content-Type": "application/json"})
        assert response.status_code == 400 and message in response.json()["error"]


@pytest.mark.parametrize("failure", [
    Neo4jUnavailable("cannot reach Neo4j at bolt://127.0.0.1:7687: start it"),
    LiveGraphError("dense seeding: the connection to Neo4j was lost"),
])
def test_neo4j_down_is_503(client, toy, failure):
    if isinstance(failure, LiveGraphError):  # as LiveGraph raises it: from the driver's error
        failure.__cause__ = ServiceUnavailable("Connection refused")
    toy.fail = failure
    response = post(client, {"question": "q"})
    assert response.status_code == 503
    assert response.json() == {"error": str(failure)}


def test_other_failures_are_500_without_a_traceback(client, toy, caplog):
    toy.fail = LiveGraphError("reading node features: Neo.ClientError.Statement.SyntaxError: bad")
    response = post(client, {"question": "q"})
    assert response.status_code == 500 and response.json()["error"].startswith("reading node features")
    toy.fail = RuntimeError("secret internals")
    response = post(client, {"question": "q"})
    assert response.status_code == 500
    assert response.json() == {"error": "internal error (RuntimeError): see the server's log"}
    assert "Traceback" not in response.text and "secret" not in response.text
    assert "secret internals" in caplog.text  # the server's log has it


def test_health_follows_the_database(client, toy):
    assert client.get("/health").json() == {"status": "ok", "version": "0.1.0", "datasets": ["toy", "untrained"]}
    toy.driver.up = False
    response = client.get("/health")
    assert response.status_code == 503 and "cannot reach Neo4j" in response.json()["error"]


def test_datasets_lists_methods_and_why_one_is_missing(client):
    body = client.get("/datasets").json()
    assert body["default"] == "toy"
    toy, untrained = body["datasets"]
    assert toy["name"] == "toy" and toy["default_method"] == "seeder" and toy["nodes"] == 4
    assert toy["methods"] == {m: {"available": True} for m in METHODS}
    assert untrained["default_method"] == "khop"
    assert untrained["methods"]["seeder"]["available"] is False
    assert untrained["methods"]["seeder"]["reason"] == "no trained checkpoint at best.pt: run `seeder-dgl train`"
    assert "/srv" not in client.get("/datasets").text  # no path of the server's disk
    assert all(untrained["methods"][m] == {"available": True} for m in ("dense", "khop", "ppr"))


def test_unknown_paths_and_methods_answer_json(client):
    response = client.get("/nowhere")
    assert response.status_code == 404 and response.json() == {"error": "Not Found"}
    response = client.get("/retrieve")
    assert response.status_code == 405 and "error" in response.json()


def test_warm_up_runs_every_available_method_once_before_serving():
    trained, untrained = FakeRetriever("a"), FakeRetriever("b", checkpoint=False)
    create_app([trained, untrained], default_method="dense")
    assert [c[2] for c in trained.calls] == ["dense", "seeder", "khop", "ppr"]  # the default first
    assert [c[2] for c in untrained.calls] == ["dense", "khop", "ppr"]
    assert all(c[0] == [WARM_UP_QUESTION] for c in trained.calls + untrained.calls)
    cold = FakeRetriever("c")
    create_app([cold], warm=False)
    assert cold.calls == []


def test_a_failing_warm_up_stops_the_server_from_starting():
    broken = FakeRetriever("a")
    broken.fail = Neo4jUnavailable("cannot reach Neo4j")
    with pytest.raises(Neo4jUnavailable):
        create_app([broken])


@pytest.mark.parametrize("retrievers,kwargs,message", [
    ([], {}, "no dataset to serve"),
    (["a", "a"], {}, "given twice"),
    (["a"], {"default_method": "magic"}, "unknown method 'magic'"),
])
def test_create_app_refuses_what_it_cannot_serve(retrievers, kwargs, message):
    with pytest.raises(SeederError, match=message):
        create_app([FakeRetriever(name) for name in retrievers], **kwargs)


def test_shutdown_closes_what_the_caller_opened(toy):
    closed = []
    with TestClient(create_app([toy], on_shutdown=lambda: closed.append(True))):
        assert closed == []
    assert closed == [True]


def test_the_page_its_files_and_the_docs_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="question"' in page.text and 'id="graph"' in page.text
    for asset in re.findall(r'(?:src|href)="(static/[^"]+)"', page.text):
        assert client.get("/" + asset).status_code == 200, asset
    docs = client.get("/docs")
    assert docs.status_code == 200 and "cdn" not in docs.text.lower()  # Swagger UI from the package
    for asset in re.findall(r"""['"](/static/swagger-ui/[^'"]+)['"]""", docs.text):
        assert client.get(asset).status_code == 200, asset
    assert len(re.findall(r"/static/swagger-ui/", docs.text)) >= 2
    schema = client.get("/openapi.json").json()
    assert set(schema["paths"]) >= {"/retrieve", "/health", "/datasets"}


def test_the_page_fetches_nothing_from_elsewhere():
    for path in (p for p in serving.STATIC.iterdir() if p.is_file()):  # the page's own files
        text = path.read_text()
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), path.name
        assert not re.search(r"""(fetch|import)\s*\(\s*["'`](https?:)?//""", text), path.name


def test_every_static_file_is_package_data():
    """A non-editable install must carry the page: pyproject's package-data globs cover each file."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["seeder_dgl"]
    package = REPO / "seeder_dgl"
    shipped = {p for pattern in patterns for p in package.glob(pattern)}
    files = [p for p in serving.STATIC.rglob("*") if p.is_file()]
    assert files and all(p in shipped for p in files), sorted(str(p) for p in files if p not in shipped)


def test_check_address_says_when_the_port_is_taken():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SeederError, match=f"cannot listen on 127.0.0.1:{port}.*--port"):
            check_address("127.0.0.1", port)
    with pytest.raises(SeederError, match="between 1 and 65535"):
        check_address("127.0.0.1", 70000)


def test_serve_with_a_taken_port_is_a_one_line_error_before_loading_anything():
    from typer.testing import CliRunner

    from seeder_dgl.cli import app

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = CliRunner().invoke(app, ["serve", "--port", str(taken.getsockname()[1])])
    assert result.exit_code == 1
    assert "error:" in result.output and "cannot listen on" in result.output


def test_serve_with_an_empty_api_key_is_a_one_line_error_before_loading_anything(monkeypatch):
    from typer.testing import CliRunner

    from seeder_dgl.cli import app

    monkeypatch.setenv("SEEDER_API_KEY", " ")
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 1 and "API key is empty" in result.output and len(result.output.splitlines()) == 1


def test_other_commands_do_not_import_the_web_stack():
    code = "import sys, seeder_dgl.cli; print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_only_this_servers_host_names_are_answered(toy):
    """DNS rebinding: a page on another site that resolves its name to 127.0.0.1 sends its own Host."""
    names = serving.allowed_host_names("127.0.0.1", ["kg.example.org"])
    assert names[:4] == ["127.0.0.1", "localhost", "::1", "[::1]"] and "kg.example.org" in names
    assert "0.0.0.0" not in serving.allowed_host_names("0.0.0.0")
    app = create_app([toy], allowed_hosts=names)
    for host, status in (("127.0.0.1:8000", 200), ("localhost", 200), ("kg.example.org", 200),
                         ("attacker.example", 400), ("127.0.0.1.attacker.example:8000", 400)):
        with TestClient(app, base_url=f"http://{host}") as c:
            assert c.get("/health").status_code == status, host



def test_a_dataset_dropped_while_served_answers_404_and_leaves_the_list(toy):
    from seeder_dgl.graphstore.live import DatasetGone

    gone = FakeRetriever("gone")

    def dropped():
        raise DatasetGone("dataset 'gone' was dropped: ingest it again")

    with TestClient(create_app([toy, gone])) as c:
        gone.graph.refresh = dropped
        gone.fail = DatasetGone("dataset 'gone' was dropped: ingest it again")
        response = post(c, {"question": "q", "dataset": "gone"})
        assert response.status_code == 404 and response.json() == {"error": "dataset 'gone' was dropped: ingest it again"}
        assert [d["name"] for d in c.get("/datasets").json()["datasets"]] == ["toy"]


def test_pages_of_other_sites_are_refused_by_their_origin(toy):
    """A page elsewhere can make a visitor's browser post to a server on 127.0.0.1 with the right Host
    (its request goes to that address); the browser names the page's own origin, which is refused."""
    app = create_app([toy], allowed_hosts=serving.allowed_host_names("127.0.0.1", ["kg.example.org"]))
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        for origin, status in ((None, 200), ("http://127.0.0.1:8000", 200), ("http://localhost:3000", 200),
                               ("https://kg.example.org", 200), ("http://[::1]:8000", 200),
                               ("https://attacker.example", 403), ("null", 403),
                               ("http://127.0.0.1.attacker.example", 403)):
            headers = {} if origin is None else {"Origin": origin}
            before = len(toy.calls)
            response = c.post("/retrieve", json={"question": "q"}, headers=headers)
            assert response.status_code == status, origin
            assert len(toy.calls) == before + (status == 200)  # a refused request retrieves nothing
            if status == 403:
                assert "refused" in response.json()["error"]
    assert serving.origin_allowed(None, []) and not serving.origin_allowed("http://[bad", ["x"])


def test_an_api_key_guards_the_api_but_not_health_or_the_page(toy):
    with TestClient(create_app([toy], api_key="s3cret")) as c:
        for path in ("/retrieve", "/datasets"):
            before = len(toy.calls)
            ask = (lambda **kw: c.post(path, json={"question": "q"}, **kw)) if path == "/retrieve" else \
                (lambda **kw: c.get(path, **kw))
            missing = ask()
            assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
            assert "API key" in missing.json()["error"]
            assert ask(headers={"X-API-Key": "wrong"}).status_code == 401 and len(toy.calls) == before
            assert ask(headers={"Authorization": "Basic s3cret"}).status_code == 401
            assert ask(headers={"X-API-Key": "s3cret"}).status_code == 200
            assert ask(headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/health").status_code == 200 and c.get("/").status_code == 200
    with pytest.raises(SeederError, match="API key is empty"):
        create_app([toy], api_key="  ")
