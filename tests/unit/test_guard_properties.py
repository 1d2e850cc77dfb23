"""Property tests (hypothesis) of the guards that keep data and servers safe, one per class of fault:

- ownership: any name either names a dataset whose cache folder is a child of the cache and not
  one of seeder-dgl's shared folders, or is refused in one line; a drop removes from a dataset's
  folder exactly seeder-dgl's entries, whatever else is there, and nothing outside it;
- a policy bound to what it was trained on: a checkpoint is refused exactly when the graph or
  the relation prior it was trained with is not the one stored now;
- the server: any Host header outside the served names, any page of another origin and any
  request without the API key is refused before any retrieval; any question is answered or is a
  one-line 400, never a 500.

Input validation (``test_validation.py``, ``test_cli_hostile_input.py``), input files
(``test_own_graph_fuzz.py``), user ids in upserts and the writer lease (``tests/e2e``) have their own.
"""
from __future__ import annotations

import re
import string

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings, strategies as st

from seeder_dgl.datasets import DATASET_FOLDER_ENTRIES, dataset_dir, remove_dataset_folder
from seeder_dgl.errors import RESERVED_NAMES, SeederError, check_dataset_name
from seeder_dgl.inference import CheckpointError, _check_bound
from seeder_dgl.serving import app as serving
from seeder_dgl.serving.app import create_app
from seeder_dgl.validation import check_question
from tests.unit.test_serve_app import FakeRetriever

PROPERTY = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# ---- ownership --------------------------------------------------------------------------------

NAMES = st.one_of(st.text(max_size=60), st.sampled_from(sorted(RESERVED_NAMES) + ["Embeddings", "..", ".", "a/b",
                                                                                   "tiny\n", "-x", "x" * 49]),
                  st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,47}", fullmatch=True))


@PROPERTY
@given(name=NAMES)
def test_a_dataset_name_is_a_child_folder_of_the_cache_or_a_one_line_refusal(tmp_path, name):
    try:
        check_dataset_name(name)
    except SeederError as exc:
        assert "\n" not in str(exc) and "cannot name a dataset" in str(exc)
        return
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,47}", name) and name.lower() not in RESERVED_NAMES
    folder = dataset_dir(name, tmp_path)
    assert folder.parent == tmp_path and folder.name == name


OURS = sorted(DATASET_FOLDER_ENTRIES) + [".x.json.tmp", ".record.tmp"]
THEIRS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,20}", fullmatch=True).filter(
    lambda n: n not in DATASET_FOLDER_ENTRIES and not (n.startswith(".") and n.endswith(".tmp")))


@PROPERTY
@given(ours=st.lists(st.sampled_from(OURS), unique=True, max_size=6),
       theirs=st.lists(THEIRS, unique=True, max_size=4), as_dirs=st.lists(st.booleans(), min_size=10, max_size=10))
def test_drop_removes_exactly_seeder_dgls_entries_of_its_folder(tmp_path_factory, ours, theirs, as_dirs):
    cache = tmp_path_factory.mktemp("cache")
    folder = cache / "kg"
    folder.mkdir()
    neighbour = cache / "other"  # another dataset's folder, with seeder-dgl's names in it
    neighbour.mkdir()
    (neighbour / OURS[0]).write_text("other dataset")
    (cache / "kg.txt").write_text("beside the folder")
    for i, name in enumerate(ours + theirs):
        entry = folder / name
        if as_dirs[i % len(as_dirs)]:
            entry.mkdir()
            (entry / "inside").write_text(name)
        else:
            entry.write_text(name)
    left = remove_dataset_folder("kg", cache)
    assert sorted(left) == sorted(theirs)
    assert folder.exists() == bool(theirs)
    for name in theirs:  # the user's entries, byte for byte
        entry = folder / name
        assert (entry / "inside" if entry.is_dir() else entry).read_text() == name
    assert (neighbour / OURS[0]).read_text() == "other dataset" and (cache / "kg.txt").read_text() == "beside the folder"


# ---- a policy bound to its graph and prior ----------------------------------------------------

IDENTITIES = st.one_of(st.none(), st.sampled_from(["fp-1", "fp-2", "created-2026-01-01"]))


@PROPERTY
@given(trained=st.fixed_dictionaries({}, optional={"graph": IDENTITIES, "relation_prior": IDENTITIES}),
       now=st.fixed_dictionaries({"graph": IDENTITIES, "relation_prior": IDENTITIES}))
def test_a_checkpoint_is_refused_exactly_when_its_graph_or_prior_changed(tmp_path, trained, now):
    graph_changed = bool(trained.get("graph")) and bool(now["graph"]) and trained["graph"] != now["graph"]
    prior_changed = "relation_prior" in trained and trained["relation_prior"] != now["relation_prior"]
    state = {"bound_to": trained}
    if graph_changed or prior_changed:
        with pytest.raises(CheckpointError) as refused:
            _check_bound(tmp_path / "best.pt", state, "kg", now)
        message = str(refused.value)
        assert "\n" not in message and "seeder-dgl train kg" in message
        assert ("another graph" in message) == graph_changed
    else:
        _check_bound(tmp_path / "best.pt", state, "kg", now)


# ---- the server -------------------------------------------------------------------------------

SERVED = serving.allowed_host_names("127.0.0.1", ["kg.example.org"])  # "::1" goes in a Host header as "[::1]"
HOSTS = st.one_of(st.sampled_from([h for h in SERVED if h != "::1"] + ["localhost.", "kg.example.org.evil"]),
                  st.from_regex(r"[a-z0-9][a-z0-9.-]{0,30}", fullmatch=True))


def _served(host: str) -> bool:
    return host in SERVED


@PROPERTY
@given(host=HOSTS, port=st.one_of(st.none(), st.integers(1, 65535)))
def test_only_the_served_host_names_are_answered(host, port):
    toy = FakeRetriever("toy")
    app = create_app([toy], allowed_hosts=SERVED, warm=False)
    with TestClient(app) as client:
        response = client.post("/retrieve", json={"question": "q"},
                               headers={"Host": host + (f":{port}" if port else "")})
    assert response.status_code == (200 if _served(host) else 400), host
    assert len(toy.calls) == (1 if _served(host) else 0)


@PROPERTY
@given(origin=st.one_of(st.sampled_from(["null", "http://127.0.0.1:8000", "https://kg.example.org",
                                         "http://localhost:3000", "http://[::1]", "file://", "http://[bad"]),
                        st.builds(lambda scheme, host: f"{scheme}://{host}", st.sampled_from(["http", "https"]),
                                  HOSTS)))
def test_a_page_of_another_origin_retrieves_nothing(origin):
    toy = FakeRetriever("toy")
    app = create_app([toy], allowed_hosts=SERVED, warm=False)
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        response = client.post("/retrieve", json={"question": "q"}, headers={"Origin": origin})
    host = re.sub(r":\d+$", "", origin.split("://", 1)[1]).strip("[]").lower() if "://" in origin else None
    allowed = host in {h.strip("[]").lower() for h in SERVED}
    assert response.status_code == (200 if allowed else 403), origin
    assert len(toy.calls) == int(allowed)


KEYS = st.text(alphabet=string.ascii_letters + string.digits + "-_.~+/", min_size=1, max_size=40)


@PROPERTY
@given(key=KEYS, given_key=st.one_of(st.none(), KEYS), bearer=st.booleans())
def test_without_the_api_key_nothing_is_retrieved(key, given_key, bearer):
    toy = FakeRetriever("toy")
    headers = {} if given_key is None else (
        {"Authorization": f"Bearer {given_key}"} if bearer else {"X-API-Key": given_key})
    with TestClient(create_app([toy], api_key=key, warm=False)) as client:
        response = client.post("/retrieve", json={"question": "q"}, headers=headers)
    assert response.status_code == (200 if given_key == key else 401)
    assert len(toy.calls) == int(given_key == key)


@PROPERTY
@given(question=st.one_of(st.text(max_size=300),
                          st.builds(lambda word, n: "who is " + word * n, st.text(min_size=1, max_size=3),
                                    st.integers(1, 120))))
def test_any_question_is_answered_or_a_one_line_400(question):
    toy = FakeRetriever("toy")
    with TestClient(create_app([toy], warm=False)) as client:
        response = client.post("/retrieve", json={"question": question})
    try:
        asked = check_question(question)
    except SeederError:
        asked = None
    assert response.status_code == (400 if asked is None else 200), response.text
    if asked is None:
        assert toy.calls == [] and "\n" not in response.json()["error"]
    else:
        assert toy.calls == [([asked], 20, "seeder")]
