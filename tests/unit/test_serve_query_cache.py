"""Questions are embedded through a bounded in-memory LRU, never the on-disk cache of node texts:
a server answering questions all day must not grow .cache/embeddings by a shard per question."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from seeder_dgl import embeddings
from seeder_dgl.api import Retriever
from tests.helpers.encoders import CountingModel, counted, counting_encoder
from seeder_dgl.embeddings import TextEncoder
from seeder_dgl.validation import ValidationError


def snapshot(folder) -> dict:
    """Every file under ``folder`` with its size and modification time (empty when there is none)."""
    if not folder.exists():
        return {}
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_questions_leave_the_disk_cache_alone_and_repeat_from_memory(tmp_path):
    enc, fake = counting_encoder(tmp_path)
    enc.encode(["a node's text"], show_progress=False)  # nodes still go to disk: one shard
    before = snapshot(tmp_path)
    assert any(name.endswith(".npz") for name in before)

    first = enc.encode_queries(["who works at Acme?", "where is Lisbon?"])
    again = enc.encode_queries(["where is Lisbon?", "who works at Acme?"])

    assert snapshot(tmp_path) == before
    assert fake.calls[1:] == [["who works at Acme?", "where is Lisbon?"]]  # one batch, then memory only
    np.testing.assert_array_equal(again, first[::-1])
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    assert enc.cache.get(embeddings._text_key("where is Lisbon?")) is None


def test_a_fresh_cache_folder_is_not_even_created(tmp_path):
    enc, fake = counting_encoder(tmp_path / "embeddings")
    enc.encode_queries(["q1", "q1", "q2"])
    assert not (tmp_path / "embeddings").exists()
    assert fake.calls == [["q1", "q2"]]  # a question asked twice in one batch is encoded once


def test_the_memory_is_bounded_least_recently_used_first(tmp_path, monkeypatch):
    monkeypatch.setattr(embeddings, "QUERY_CACHE_SIZE", 2)
    enc, fake = counting_encoder(tmp_path)
    enc.encode_queries(["a"])
    enc.encode_queries(["b"])
    enc.encode_queries(["a"])  # a is now the most recent
    enc.encode_queries(["c"])  # evicts b, the least recently used
    assert len(enc._queries) == 2
    calls = counted(fake.calls)
    enc.encode_queries(["a", "c"])
    assert counted(fake.calls) == calls  # both still in memory
    enc.encode_queries(["b"])
    assert fake.calls[-1] == ["b"]  # b was evicted and is encoded again


def test_cached_rows_cannot_be_changed_by_a_caller(tmp_path):
    enc, _ = counting_encoder(tmp_path)
    out = enc.encode_queries(["q"])
    out[0, 0] = 123.0  # the caller's own array
    assert enc.encode_queries(["q"])[0, 0] != 123.0
    assert enc.encode_queries([]).shape == (0, 8)


def test_threads_asking_at_once_get_the_right_rows(tmp_path):
    enc, _ = counting_encoder(tmp_path)
    expected = {f"q{i}": enc._encode_model([f"q{i}"], 1)[0] for i in range(40)}
    wrong: list[str] = []

    def client(offset: int) -> None:
        for i in range(200):
            text = f"q{(i * 7 + offset) % 40}"
            if not np.array_equal(enc.encode_queries([text])[0], expected[text]):
                wrong.append(text)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == [] and len(enc._queries) == 40


def bare_retriever(encoder) -> Retriever:
    """A Retriever with only an encoder (embedding needs nothing else; no database is opened)."""
    retriever = Retriever.__new__(Retriever)
    retriever._encoder = encoder
    return retriever


def test_the_retriever_embeds_several_questions_in_one_batch_in_memory(tmp_path):
    enc, fake = counting_encoder(tmp_path)
    retriever = bare_retriever(enc)
    out = retriever.embed_many(["  who works at Acme? ", "where is Lisbon?"])
    assert fake.calls == [["who works at Acme?", "where is Lisbon?"]] and out.shape == (2, 8)
    np.testing.assert_array_equal(retriever.embed("who works at Acme?"), out[0])
    assert len(fake.calls) == 1 and snapshot(tmp_path) == {}
    with pytest.raises(ValidationError, match="empty"):
        retriever.embed_many(["fine", "  "])  # every question is checked before any is encoded
    assert len(fake.calls) == 1


def test_an_encoder_of_your_own_needs_only_encode(tmp_path):
    class OwnEncoder:
        def __init__(self):
            self.model = CountingModel()

        def encode(self, texts, show_progress=True):
            return self.model.encode(texts)

    own = OwnEncoder()
    assert bare_retriever(own).embed_many(["a", "b"]).shape == (2, 8)
    assert own.model.calls == [["a", "b"]]


def test_real_minilm_questions_match_node_encoding_and_touch_no_file(tmp_path, monkeypatch):
    enc = TextEncoder(cache_dir=tmp_path, backend="torch")
    node_rows = enc.encode(["Where does Ada Okafor work?", "Acme Robotics"], show_progress=False)
    before = snapshot(tmp_path)
    calls = []
    real_encode = enc.model.encode
    monkeypatch.setattr(enc.model, "encode", lambda batch, **kw: calls.append(list(batch)) or real_encode(batch, **kw))

    question = enc.encode_queries(["Where does Ada Okafor work?"])
    repeated = enc.encode_queries(["Where does Ada Okafor work?"])

    assert snapshot(tmp_path) == before
    assert calls == [["Where does Ada Okafor work?"]]  # the repeat came from memory
    np.testing.assert_allclose(question[0], node_rows[0], atol=1e-5)  # the same space as the nodes
    np.testing.assert_array_equal(repeated, question)


def test_on_onnx_runtime_only_the_models_export_is_written_once(tmp_path):
    """By default (``auto``) questions go through ONNX Runtime: the model is exported once into the
    cache's ``onnx/`` folder; questions themselves never reach a file."""
    enc = TextEncoder(cache_dir=tmp_path)
    node_rows = enc.encode(["Where does Ada Okafor work?"], show_progress=False)
    before = snapshot(tmp_path)
    question = enc.encode_queries(["Where does Ada Okafor work?"])
    assert enc.questions_on_onnx()
    exported = snapshot(tmp_path)
    new_files = set(exported) - set(before)
    assert len(new_files) == 1 and next(iter(new_files)).startswith("onnx/")
    assert {n: exported[n] for n in before} == before
    enc.encode_queries(["Who founded Acme Robotics?", "where is Lisbon?"])
    assert snapshot(tmp_path) == exported
    np.testing.assert_allclose(question[0], node_rows[0], atol=1e-5)
