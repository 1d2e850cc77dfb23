"""The HTTP API and the page of ``seeder-dgl serve``.

    POST /retrieve   {question | questions, k, method, dataset} -> Retrieval.to_dict(), the JSON of
                     `seeder-dgl query --format json` (a list of them for ``questions``)
    GET  /health     the server and its Neo4j answer
    GET  /datasets   the served datasets, each one's default method and which methods it can run
    GET  /           a page: ask a question, see the ranked nodes and the retrieved subgraph drawn
    GET  /docs       the OpenAPI documentation (FastAPI's)

Every error is JSON ``{"error": "<one line>"}``: 400 for a request to fix (an empty question, a bad
``k``, an unknown method or dataset, a method the dataset has no checkpoint for), 503 when Neo4j
cannot be reached, 500 for anything else, whose traceback goes to the server's log, never to the
client.

The Retriever objects are opened by the caller (the command line, a test, your own code) and
handed to :func:`create_app`, which loads what each needs (encoder, policy) and warms it with one
retrieval per method before the first request, so no request pays for loading.
"""
from __future__ import annotations

import hmac
import logging
import re
import socket
from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from neo4j.exceptions import ServiceUnavailable, SessionExpired, TransientError
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from seeder_dgl import __version__
from seeder_dgl.api import METHODS, Retriever
from seeder_dgl.embeddings import dataset_encoder
from seeder_dgl.errors import SeederError, raised_from
from seeder_dgl.graphstore.async_reads import AsyncReads
from seeder_dgl.graphstore.connection import Neo4jUnavailable, default_database, open_async_driver, open_driver
from seeder_dgl.graphstore.cypher import query
from seeder_dgl.graphstore.live import DatasetGone
from seeder_dgl.validation import MAX_K, ValidationError

STATIC = Path(__file__).resolve().parent / "static"
"""The page's files (package data: nothing is fetched from elsewhere when it loads)."""
MAX_QUESTIONS = 64
"""Most questions one request may send: they are embedded in one batch and answered in turn."""
WARM_UP_QUESTION = "which nodes are related to this question"
FALLBACK_METHOD = "khop"
"""A dataset's default when the server's default method cannot run on it (no trained checkpoint)."""

log = logging.getLogger("seeder_dgl.serving")


# ---- request and response shapes (the response models document /docs; answers are not filtered) ----
class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"question": "who directed the movies written by Kazuo Ishiguro", "k": 10, "method": "seeder"},
        {"questions": ["who starred in Inception", "what did Greta Gerwig direct"], "k": 5}]})

    question: str | None = Field(None, description="One question; or send `questions`.")
    questions: list[str] | None = Field(None, max_length=MAX_QUESTIONS,
                                        description=f"Several questions (at most {MAX_QUESTIONS}), "
                                                    "embedded in one batch; the answer is a list.")
    k: int = Field(20, ge=1, le=MAX_K, strict=True, description="How many nodes to return per question.")
    method: str | None = Field(None, description=f"One of {', '.join(METHODS)} [default: the dataset's, "
                                                 "see GET /datasets].")
    dataset: str | None = Field(None, description="A served dataset [default: the first one served].")


class NodeOut(BaseModel):
    id: int
    type: str
    name: str
    score: float
    seed: bool = Field(description="One of the seeds the expansion started from.")


class TripleOut(BaseModel):
    head: str
    relation: str
    tail: str


class RetrievalOut(BaseModel):
    question: str
    method: str
    seconds: float = Field(description="Seeding, expansion and ranking on the live graph (embedding excluded).")
    subgraph_size: int
    nodes: list[NodeOut]
    triples: list[TripleOut]


class ErrorOut(BaseModel):
    error: str


ERRORS = {400: {"model": ErrorOut, "description": "A request to fix"},
          404: {"model": ErrorOut, "description": "The dataset was dropped since the server started"},
          503: {"model": ErrorOut, "description": "Neo4j cannot be reached"},
          500: {"model": ErrorOut, "description": "Anything else (details in the server's log)"}}


# ---- errors ---------------------------------------------------------------------------------------
class ApiError(Exception):
    """An answer other than 200 that the app chose itself, with its one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def database_down(exc: BaseException | None) -> bool:
    """Whether ``exc`` or anything it was raised from says Neo4j cannot be reached or cannot
    answer now. The project wraps driver errors in its own (LiveGraphError ``from`` the driver's),
    so the chain is followed rather than the outer type alone."""
    return raised_from(exc, (Neo4jUnavailable, ServiceUnavailable, SessionExpired, TransientError, ConnectionError))


def error_status(exc: BaseException) -> int:
    if isinstance(exc, ApiError):
        return exc.status
    if isinstance(exc, DatasetGone):
        return 404
    if database_down(exc):
        return 503
    if isinstance(exc, ValidationError):
        return 400
    return 500


def error_response(exc: BaseException) -> JSONResponse:
    """The JSON answer for ``exc``: the project's own one-line message, or for a bug only its type
    (the traceback is logged here, on the server)."""
    status = error_status(exc)
    if isinstance(exc, (ApiError, SeederError)):
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if status == 500:
            log.error("request failed: %s", message, exc_info=exc)
    else:
        log.error("request failed with an unexpected error", exc_info=exc)
        message = f"internal error ({type(exc).__name__}): see the server's log"
    return JSONResponse({"error": message}, status_code=status)


def validation_message(exc: RequestValidationError) -> str:
    """FastAPI's list of request problems as one line."""
    problems = exc.errors()
    if not problems:
        return "the request is not valid"
    first = problems[0]
    where = [str(p) for p in first.get("loc", ()) if p != "body"]
    if first.get("type") == "json_invalid":
        text = f"the request body is not valid JSON ({first.get('ctx', {}).get('error', first.get('msg'))})"
    elif not where and first.get("type") == "missing":
        text = 'send a JSON body, e.g. {"question": "...", "k": 10}'
    elif first.get("type") == "extra_forbidden":
        text = (f"unknown field {'.'.join(where)!r}: send question or questions, k, method, dataset")
    else:
        text = f"{'.'.join(where) or 'body'}: {first.get('msg', 'not valid')}"
    more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
    return text + more


def without_paths(text: str) -> str:
    """``text`` with file paths of the server's disk shortened to their last part: a client learns
    what is missing, not where the server keeps its files."""
    return re.sub(r"(?<![\w.])(?:~|[A-Za-z]:)?(?:[/\\][^\s/\\:;,'\")]+)+[/\\]([^\s/\\:;,'\")]+)", r"\1", text)


# ---- the served datasets ----------------------------------------------------------------------------
@dataclass
class ServedDataset:
    retriever: object
    """A ``seeder_dgl.api.Retriever`` (or anything with its ``dataset``, ``graph.info``, ``policy``,
    ``retrieve_many`` and ``aretrieve_many``)."""
    default_method: str
    unavailable: dict[str, str]
    """Method -> why this dataset cannot run it (so far only SeedER without a checkpoint)."""

    @property
    def name(self) -> str:
        return self.retriever.dataset

    def describe(self) -> dict:
        info = self.retriever.graph.info
        return {"name": self.name, "nodes": int(info.num_nodes), "relationships": int(info.num_relationships),
                "model": info.model, "profile": getattr(self.retriever, "profile", None),
                "default_method": self.default_method,
                "methods": {m: ({"available": False, "reason": without_paths(self.unavailable[m])}
                                if m in self.unavailable
                                else {"available": True}) for m in METHODS}}


def choose(served: dict[str, ServedDataset], dataset: str | None, method: str | None) -> tuple[ServedDataset, str]:
    """The served dataset (None: the first) and method (None: its default) a request asks for, or a
    one-line ``SeederError`` saying what to ask instead: the HTTP server answers it as 400, the MCP
    server as a tool error, in the same words."""
    name = dataset if dataset is not None else next(iter(served))
    if name not in served:
        raise SeederError(f"dataset {name!r} is not served here: choose one of {', '.join(served)}")
    target = served[name]
    chosen = method if method is not None else target.default_method
    if chosen not in METHODS:
        raise SeederError(f"unknown method {chosen!r}: choose one of {', '.join(METHODS)}")
    if chosen in target.unavailable:
        raise SeederError(f"method {chosen!r} is not available for {name}: {target.unavailable[chosen]}")
    return target, chosen


def prepare(retriever, default_method: str, warm: bool = True) -> ServedDataset:
    """Load what ``retriever`` needs and, with ``warm``, run one retrieval per method it can run, so
    the first request finds the encoder and policy loaded and Neo4j's query plans compiled.

    A dataset without a trained checkpoint is served without SeedER: that is a fact to report in
    ``/datasets`` (and to answer with 400 when asked for), not a reason to refuse the other methods.
    """
    unavailable: dict[str, str] = {}
    try:
        _ = retriever.policy  # loads the checkpoint, or says why there is none
    except SeederError as exc:
        unavailable["seeder"] = str(exc)
    default = default_method if default_method not in unavailable else FALLBACK_METHOD
    if warm:
        for method in [default] + [m for m in METHODS if m != default and m not in unavailable]:
            retriever.retrieve_many([WARM_UP_QUESTION], k=5, method=method)
    return ServedDataset(retriever, default, unavailable)


# ---- the app ----------------------------------------------------------------------------------------
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def allowed_host_names(host: str, extra: Sequence[str] = ()) -> list[str]:
    """The Host header names a server listening on ``host`` answers to: localhost's, the address it
    listens on (unless every interface), and ``extra`` (``serve --allowed-host``)."""
    names = list(LOCAL_HOSTS)
    if host not in ("0.0.0.0", "::", "") and host not in names:
        names.append(host)
    return names + [h for h in extra if h not in names]


PROTECTED = ("/retrieve", "/datasets")
"""The paths an API key guards (``serve --api-key``); /health stays open to probes, the page and its
files to the browser, which then sends the key the user types."""


def check_api_key(api_key: str | None) -> str | None:
    """``api_key`` as given (None: no key), or a one-line ``SeederError`` when it is blank."""
    if api_key is not None and not api_key.strip():
        raise SeederError("the API key is empty: give a secret of your own, or no --api-key")
    return api_key


def origin_allowed(origin: str | None, allowed_hosts: Sequence[str]) -> bool:
    """Whether a request's Origin header (None: not sent, as by curl, scripts and same-origin GETs)
    names one of ``allowed_hosts``: a page on another site that posts to a server on 127.0.0.1 sends
    its own origin, and is refused."""
    if origin is None:
        return True
    try:
        host = urlsplit(origin).hostname
    except ValueError:
        return False
    return host is not None and (host in allowed_hosts or f"[{host}]" in allowed_hosts)


def key_matches(request: Request, api_key: str) -> bool:
    """``Authorization: Bearer KEY`` or ``X-API-Key: KEY``, compared in constant time."""
    given = request.headers.get("x-api-key")
    if given is None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        given = token.strip() if scheme.lower() == "bearer" else ""
    return hmac.compare_digest(given.encode(), api_key.encode())


def create_app(retrievers: Sequence, *, default_method: str = "seeder", warm: bool = True,
               on_shutdown: Callable[[], None] | None = None,
               allowed_hosts: Sequence[str] | None = None, api_key: str | None = None) -> FastAPI:
    """The FastAPI app serving ``retrievers`` (open Retriever objects, one per dataset; the first is
    the default dataset). ``default_method`` is each dataset's method unless it cannot run there
    (then K-hop). ``warm``: load and run each retriever once now (see :func:`prepare`).
    ``on_shutdown`` runs when the server stops (e.g. closing the shared Neo4j driver).

    ``allowed_hosts``: the Host header names to answer (others get 400), so that a page on another
    site cannot reach a server on 127.0.0.1 through DNS rebinding; ``serve`` passes
    :func:`allowed_host_names`, None answers any (tests, a server behind a proxy that checks). With
    them, a request whose Origin names another site is refused too (403): a page elsewhere cannot
    have a visitor's browser post questions to it.

    ``api_key``: when given, /retrieve and /datasets answer 401 unless the request sends it
    (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``; ``serve --api-key`` or ``SEEDER_API_KEY``).

    One-line ``SeederError`` when there is nothing to serve or a retriever fails its warm-up.
    """
    if default_method not in METHODS:
        raise SeederError(f"unknown method {default_method!r}: choose one of {', '.join(METHODS)}")
    served: dict[str, ServedDataset] = {}
    for retriever in retrievers:
        if retriever.dataset in served:
            raise SeederError(f"dataset {retriever.dataset!r} is given twice: name each dataset once")
        served[retriever.dataset] = prepare(retriever, default_method, warm=warm)
    if not served:
        raise SeederError("no dataset to serve: ingest one first (`seeder-dgl ingest metaqa`)")
    default_dataset = next(iter(served))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        for target in served.values():  # the async drivers opened on this loop
            aclose = getattr(target.retriever, "aclose_reads", None)
            if aclose is not None:
                await aclose()
        if on_shutdown is not None:
            on_shutdown()

    app = FastAPI(title="seeder-dgl", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="SeedER retrieval on knowledge graphs kept in Neo4j. `POST /retrieve` answers "
                              "with the JSON of `seeder-dgl query --format json`; errors are "
                              '`{"error": "..."}`.')
    app.state.served = served
    if allowed_hosts is not None or check_api_key(api_key) is not None:
        @app.middleware("http")
        async def _guard(request: Request, call_next):
            origin = request.headers.get("origin")
            if allowed_hosts is not None and not origin_allowed(origin, allowed_hosts):
                return JSONResponse({"error": f"requests from pages at {origin} are refused: serve "
                                              "--allowed-host names the hosts whose pages may ask"}, status_code=403)
            if api_key is not None and request.url.path in PROTECTED and not key_matches(request, api_key):
                return JSONResponse({"error": "missing or wrong API key: send it as 'Authorization: Bearer KEY' or "
                                              "'X-API-Key: KEY'"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})
            return await call_next(request)

    if allowed_hosts is not None:  # added last, so it runs first: an unknown Host is refused before all
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": validation_message(exc)}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        return error_response(exc)

    def pick(request: RetrieveRequest) -> tuple[ServedDataset, str, list[str]]:
        """The dataset, method and questions a request asks for, or a 400 saying what to send."""
        try:
            target, method = choose(served, request.dataset, request.method)
        except SeederError as exc:
            raise ApiError(400, str(exc)) from None
        if (request.question is None) == (request.questions is None):
            raise ApiError(400, "send either question (one) or questions (a list), not "
                                + ("both" if request.question is not None else "neither"))
        if request.questions is not None and not request.questions:
            raise ApiError(400, "questions is an empty list: send at least one question")
        return target, method, [request.question] if request.question is not None else request.questions

    # Retrieval is async: its Neo4j reads are awaited on the driver's async API (Retriever.aretrieve_many),
    # so the event loop answers other clients while one waits on Neo4j, with no thread per request.
    # The other endpoints are plain `def`: FastAPI runs them on its thread pool.
    @app.post("/retrieve", response_model=None, summary="Retrieve nodes for one question or several",
              responses={200: {"model": RetrievalOut | list[RetrievalOut]}, **ERRORS})
    async def retrieve(request: RetrieveRequest) -> JSONResponse:
        try:
            target, method, questions = pick(request)
            results = await target.retriever.aretrieve_many(questions, k=request.k, method=method)
        except Exception as exc:  # every failure answers as one JSON line; bugs are logged in full
            return error_response(exc)
        payload = [r.to_dict() for r in results]
        return JSONResponse(payload if request.questions is not None else payload[0])

    @app.get("/health", summary="Whether the server and its Neo4j answer",
             responses={503: ERRORS[503]})
    def health() -> JSONResponse:
        drivers = {id(d): d for d in (getattr(s.retriever, "driver", None) for s in served.values())
                   if d is not None}
        try:
            for driver in drivers.values():
                driver.verify_connectivity()
        except Exception as exc:
            log.warning("health check: Neo4j does not answer (%s)", type(exc).__name__)
            return JSONResponse({"status": "unavailable", "error": f"cannot reach Neo4j ({type(exc).__name__})"},
                                status_code=503)
        return JSONResponse({"status": "ok", "version": __version__, "datasets": list(served)})

    @app.get("/datasets", summary="The served datasets and the methods each can run")
    def datasets() -> JSONResponse:
        current = []
        for target in served.values():
            try:
                target.retriever.graph.refresh()  # one small query: the record is still there
            except DatasetGone:
                continue  # dropped since the server started: no longer offered
            except Exception:  # noqa: BLE001 - Neo4j down: /health says so; list what was served
                pass
            current.append(target.describe())
        return JSONResponse({"default": default_dataset, "datasets": current})

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        # FastAPI's own /docs loads Swagger UI from a CDN; this one is the copy in the package.
        return get_swagger_ui_html(openapi_url=app.openapi_url, title="seeder-dgl API",
                                   swagger_js_url="/static/swagger-ui/swagger-ui-bundle.js",
                                   swagger_css_url="/static/swagger-ui/swagger-ui.css",
                                   swagger_favicon_url="/static/swagger-ui/favicon-32x32.png")

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    return app


def open_retrievers(datasets: Sequence[str], *, method: str = "seeder", profile: str | None = None):
    """One Retriever per dataset (every completely ingested dataset in Neo4j when none is named),
    sharing one driver, and one encoder per model (so its question cache is shared too).
    Returns (retrievers, driver); close the driver when done."""
    # Retrieval reads through the async driver of the server's event loop (Retriever.aretrieve_many);
    # loading, warm-up and the other endpoints through the sync one.
    driver = AsyncReads(open_driver(), open_async_driver)
    try:
        rows = {r["name"]: r for r in driver.execute_query(query("dataset/list"),
                                                           database_=default_database()).records}
        if not datasets:
            datasets = [name for name, r in rows.items() if r["status"] == "complete"]
            if not datasets:
                raise SeederError("no dataset is ready to serve" + (
                    f" ({', '.join(rows)} only partly ingested: run `seeder-dgl ingest` again to finish)" if rows
                    else ": run `seeder-dgl ingest metaqa` first"))
        retrievers = []
        for name in dict.fromkeys(datasets):
            model = rows[name]["model"] if name in rows else None  # an unknown name fails in Retriever
            # One encoder per model, shared by the datasets and their relation priors' templates.
            encoder = dataset_encoder(model) if model is not None else None
            retrievers.append(Retriever(name, method=method, profile=profile, driver=driver, encoder=encoder))
    except BaseException:
        driver.close()
        raise
    return retrievers, driver


def check_address(host: str, port: int) -> None:
    """One-line error now, before minutes of loading, when ``host:port`` cannot be listened on."""
    if not 0 < port < 65536:
        raise SeederError(f"--port must be between 1 and 65535, not {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.create_server((host, port), family=family):
            pass
    except OSError as exc:
        raise SeederError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): "
                          "pass another --port, or stop what uses it") from None
