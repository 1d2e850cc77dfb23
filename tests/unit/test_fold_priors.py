"""Relation priors cross-fitted by wording: which templates each fold's prior may read, and how
the folds are stored and read back."""
from __future__ import annotations

import json

import numpy as np
import pytest

from seeder_dgl.retrieval.link_training import MIN_FOLD_TEMPLATES, FoldPriors, cross_fit, wording_fold
from seeder_dgl.retrieval.relation_prior import RelationPrior


def _prior(value: float) -> RelationPrior:
    return RelationPrior(np.full((1, 2, 3), value), np.zeros((1, 2)), ["a", "b"], {"value": value})


def test_a_wording_keeps_its_fold_whatever_its_case_and_punctuation():
    for folds in (2, 4, 7):
        fold = wording_fold("what films did x star in", folds)
        assert 0 <= fold < folds
        assert wording_fold("What films, did X star in?", folds) == fold
        assert wording_fold("what  films did x star in", folds) == fold
    spread = {wording_fold(f"which {word} is x", 4) for word in ("film", "actor", "year", "genre", "tag", "writer",
                                                                "language", "director", "rating", "vote")}
    assert len(spread) > 1  # distinct wordings do not all fall in one fold


def test_no_fold_prior_reads_its_own_folds_wordings():
    wordings = [f"what is the {w} of x" for w in ("mother", "father", "sister", "brother", "spouse", "child",
                                                   "employer", "birthplace", "nationality", "school")]
    rows, owners = [], []
    for qid in range(200):
        rows.append(wordings[qid % len(wordings)])
        owners.append(qid)
        if qid % 3 == 0:  # a typed variant: another template, the same question
            rows.append(rows[-1].upper().replace("X", "x").replace("OF", "0f"))
            owners.append(qid)
    seen: list[np.ndarray] = []

    def fit(pick):
        seen.append(pick)
        return _prior(float(len(seen)))

    found = cross_fit(rows, owners, 4, fit, "full")
    assert found and found.folds == 4 and found.full == "full"
    assert [p.stats["value"] for p in found.priors] == [1.0, 2.0, 3.0, 4.0]
    for qid, row in zip(owners, rows):  # every row of a question goes with its wording as written
        assert found.fold_of[qid] == wording_fold(rows[owners.index(qid)], 4)
    for k, pick in enumerate(seen):
        held = {i for i, qid in enumerate(owners) if found.fold_of[qid] == k}
        assert held and not held & set(pick.tolist())
        assert len(held) + len(pick) == len(rows)


def test_too_few_wordings_are_not_cross_fitted():
    def fit(pick):
        raise AssertionError("no fold prior should be fitted")

    one = cross_fit(["what is x"] * 50, list(range(50)), 4, fit, "full")  # one wording: three empty folds
    assert not one and one.folds == 0
    few = [f"what is the {w} of x" for w in ("a", "b", "c", "d", "e", "f", "g", "h")]
    small = cross_fit(few, list(range(len(few))), 2, fit, "full")  # far under MIN_FOLD_TEMPLATES per fit
    assert len(few) < MIN_FOLD_TEMPLATES and not small


def test_fold_priors_are_stored_and_read_back():
    found = FoldPriors([_prior(1.0), _prior(2.0)], {7: 0, 9: 1}, "abc")
    back = FoldPriors.from_json(found.to_json())
    assert back.full == "abc" and back.fold_of == {7: 0, 9: 1}
    assert [p.fingerprint for p in back.priors] == [p.fingerprint for p in found.priors]
    assert back.fold(9, "anything") == 1  # the fit's fold first
    assert back.fold(11, "what is x") == wording_fold("what is x", 2)  # else its wording's
    assert back.fold(11, None) == 11 % 2
    empty = FoldPriors.from_json(FoldPriors([], {}, "abc").to_json())
    assert not empty and empty.full == "abc"
    raw = json.loads(found.to_json())
    raw["fold_of"] = [[7, 5]]
    with pytest.raises(ValueError, match="fold priors"):
        FoldPriors.from_json(json.dumps(raw))
    with pytest.raises(ValueError, match="fold priors"):
        FoldPriors.from_json(json.dumps({**raw, "fold_of": [], "priors": raw["priors"][:1]}))


class _Encoder:
    def encode_queries(self, texts):
        return np.ones((len(texts), 3))

    def encode_query_tokens(self, texts):
        raise AssertionError("not read here")


def test_fold_priors_are_read_only_for_the_prior_they_were_fitted_with(tmp_path):
    from seeder_dgl.retrieval.extract import load_fold_priors

    full = _prior(0.5)
    path = tmp_path / "prior-folds.json"
    assert load_fold_priors(path, full, _Encoder(), ["a", "b"]) is None  # none written yet
    path.write_text(FoldPriors([_prior(1.0), _prior(2.0)], {3: 1}, full.fingerprint).to_json())
    found = load_fold_priors(path, full, _Encoder(), ["b", "a"])
    assert found is not None and found.fold_of == {3: 1}
    assert all(p.relation_types == ["b", "a"] and p.bound for p in found.priors)  # aligned, bound to the encoder
    assert load_fold_priors(path, _prior(0.7), _Encoder(), ["a", "b"]) is None  # another prior's folds
    assert load_fold_priors(path, None, _Encoder(), ["a", "b"]) is None
    path.write_bytes(b"\x00\xff not json")
    assert load_fold_priors(path, full, _Encoder(), ["a", "b"]) is None  # damaged: fitted again, not an error
