"""Text encoder: the real offline MiniLM, cache hits, normalisation; STaRK precomputed embeddings."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from seeder_dgl import embeddings
from tests.helpers.encoders import CountingModel, counted, counting_encoder
from seeder_dgl.embeddings import EmbeddingError, TextEncoder, load_precomputed, readable_relation


def test_readable_relation_names():
    assert readable_relation("directed_by") == "directed by"
    assert readable_relation("author___writes___paper") == "author writes paper"
    assert readable_relation("off-label use") == "off-label use"


@pytest.fixture(scope="module")
def minilm_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("emb-cache")


def test_real_minilm_offline_normalised_and_cached(minilm_cache, monkeypatch):
    texts = ["Donepezil treats Alzheimer disease", "a drug for dementia", "the 1944 film Kismet"]
    enc = TextEncoder(cache_dir=minilm_cache)
    assert enc.model_name == str(embeddings.default_model_path())
    x = enc.encode(texts, batch_size=2, show_progress=False)
    assert x.shape == (3, 384) and x.dtype == np.float32 and enc.dimension == 384
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    assert x[0] @ x[1] > x[0] @ x[2]  # the drug texts are closer to each other than to the film

    # A new encoder on the same cache answers without touching the model at all.
    again = TextEncoder(cache_dir=minilm_cache)
    assert again.identity == enc.identity
    assert again.dimension == 384 and again._model is None
    np.testing.assert_array_equal(again.encode(texts, show_progress=False), x)
    assert again._model is None

    # Only new texts reach the model, and each once.
    calls = []
    real_encode = enc.model.encode
    monkeypatch.setattr(enc.model, "encode", lambda batch, **kw: calls.append(list(batch)) or real_encode(batch, **kw))
    y = enc.encode([texts[2], "a new text", "a new text", texts[0]], show_progress=False)
    assert calls == [["a new text"]]
    np.testing.assert_array_equal(y[0], x[2])
    np.testing.assert_array_equal(y[1], y[2])

    rel = enc.encode_relations(["directed_by", "starred_actors"])
    assert rel.shape == (2, 384)
    np.testing.assert_allclose(rel[0], enc.encode(["directed by"], show_progress=False)[0])


def test_cache_is_keyed_by_model(tmp_path):
    a, fake_a = counting_encoder(tmp_path)
    a.encode(["x", "y"], show_progress=False)
    b = TextEncoder(model="another-model", cache_dir=tmp_path)
    fake_b = CountingModel()
    b._model = fake_b
    b.encode(["x"], show_progress=False)
    assert counted(fake_a.calls) == 2 and counted(fake_b.calls) == 1
    assert len({p.name for p in tmp_path.iterdir()}) == 2


def test_interrupted_run_keeps_finished_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(embeddings, "CHUNK", 4)
    texts = [f"text {i}" for i in range(10)]

    class Failing(CountingModel):
        def encode(self, batch, **kwargs):
            if counted(self.calls) >= 8:
                raise KeyboardInterrupt
            return super().encode(batch, **kwargs)

    enc, _ = counting_encoder(tmp_path, Failing())
    with pytest.raises(KeyboardInterrupt):
        enc.encode(texts, show_progress=False)
    enc2, fake2 = counting_encoder(tmp_path)
    out = enc2.encode(texts, show_progress=False)
    assert fake2.calls == [["text 8", "text 9"]]  # the first two chunks were kept on disk
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert not list(tmp_path.rglob("*.tmp"))


def test_shards_are_compacted(tmp_path, monkeypatch):
    monkeypatch.setattr(embeddings, "MAX_SHARDS", 3)
    enc, fake = counting_encoder(tmp_path)
    first = enc.encode(["a"], show_progress=False)
    for i in range(6):
        enc.encode([f"t{i}"], show_progress=False)
    folder = enc.cache_folder
    assert len(list(folder.glob("shard-*.npz"))) <= 3
    enc2, fake2 = counting_encoder(tmp_path)
    np.testing.assert_array_equal(enc2.encode(["a"], show_progress=False), first)
    assert fake2.calls == []


def test_cache_disabled_and_empty_input(tmp_path):
    enc = TextEncoder(model="fake-model", cache_dir=False)
    fake = CountingModel(dim=5)
    enc._model = fake
    assert enc.encode([], show_progress=False).shape == (0, 5)
    enc.encode(["q", "q"], show_progress=False)
    enc.encode(["q"], show_progress=False)
    assert fake.calls == [["q"], ["q"]] and enc.cache_folder is None


def test_damaged_cache_file_is_one_line_error(tmp_path):
    enc, _ = counting_encoder(tmp_path)
    enc.encode(["a"], show_progress=False)
    shard = next(enc.cache_folder.glob("shard-*.npz"))
    shard.write_bytes(shard.read_bytes()[:20])
    with pytest.raises(EmbeddingError, match="damaged.*delete it"):
        counting_encoder(tmp_path)[0].encode(["a"], show_progress=False)


def test_unloadable_model_is_one_line_error(tmp_path):
    empty = tmp_path / "no-model-here"
    empty.mkdir()
    enc = TextEncoder(model=empty, cache_dir=False)
    with pytest.raises(EmbeddingError) as exc:
        enc.encode(["x"], show_progress=False)
    assert "could not load the encoder" in str(exc.value) and "\n" not in str(exc.value)


# ---- STaRK precomputed embeddings ---------------------------------------------------------------
def test_load_precomputed(tmp_path):
    table = {i: torch.randn(1, 6) for i in range(4)}  # STaRK stores [1, d] per id
    table[2] = torch.randn(6)
    torch.save(table, tmp_path / "candidate_emb_dict.pt")
    x = load_precomputed(tmp_path / "candidate_emb_dict.pt")
    assert x.shape == (4, 6) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)
    raw = load_precomputed(tmp_path / "candidate_emb_dict.pt", ids=[3, 1], normalize=False)
    np.testing.assert_allclose(raw[0], table[3].reshape(-1).numpy())

    with pytest.raises(EmbeddingError, match=r"no embedding for id 4 \(2 of 5 ids missing\)"):
        load_precomputed(tmp_path / "candidate_emb_dict.pt", ids=[0, 4, 1, 2, 9])
    assert load_precomputed(tmp_path / "candidate_emb_dict.pt", num_nodes=4).shape == (4, 6)
    with pytest.raises(EmbeddingError, match=r"holds 4 embeddings, 2 of them for ids the graph does not have"):
        load_precomputed(tmp_path / "candidate_emb_dict.pt", num_nodes=2)  # a file made for another graph
    table[3] = torch.randn(1, 7)
    torch.save(table, tmp_path / "wrong_dim.pt")
    with pytest.raises(EmbeddingError, match="id 3 has a 7-d embedding, earlier ids are 6-d"):
        load_precomputed(tmp_path / "wrong_dim.pt")
    table[3] = torch.full((6,), float("nan"))
    torch.save(table, tmp_path / "nan.pt")
    with pytest.raises(EmbeddingError, match="id 3 contains NaN"):
        load_precomputed(tmp_path / "nan.pt")
    with pytest.raises(EmbeddingError, match="is missing"):
        load_precomputed(tmp_path / "absent.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(EmbeddingError, match="not a readable torch file"):
        load_precomputed(tmp_path / "junk.pt")


def test_real_minilm_gives_a_question_and_its_tokens_in_one_pass(minilm_cache):
    enc = TextEncoder(cache_dir=minilm_cache)
    texts = ["who is the successor of the parent of x", "what films did x act in"]
    sentences, tokens, spans = enc.encode_query_tokens(texts)
    np.testing.assert_allclose(sentences, enc.encode_queries(texts), atol=1e-5)
    assert sentences.dtype == np.float32 and len(tokens) == 2
    # Word pieces plus [CLS] and [SEP], no padding: the shorter question has its own length.
    assert tokens[0].shape[1] == 384 and tokens[0].shape[0] >= 11 and tokens[1].shape[0] == 8
    # Each token's characters in the text: 'x' is the 4th word piece of the second question.
    assert spans[1].shape == (8, 2) and tuple(spans[1][0]) == (0, 0) and tuple(spans[1][4]) == (15, 16)
    assert texts[1][slice(*spans[1][2])] == "films"
    empty_s, empty_t, empty_spans = enc.encode_query_tokens([])
    assert empty_s.shape == (0, 384) and empty_t == [] and empty_spans == []
