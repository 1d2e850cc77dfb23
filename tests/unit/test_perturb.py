"""Questions as people type them: each perturbation, its determinism and its one-line errors."""
from __future__ import annotations

import random

import pytest

from loaders.perturb import (PARTIAL_NAMES_MIX, PERTURBATIONS, TYPED_MIX, check_kinds, find_span, no_punctuation,
                             perturb, perturb_all, surname, typed_variant, typo, word_typo)


def test_lower_and_shuffle_case_change_only_letter_case():
    text = "What films did Tom Hanks star in?"
    assert perturb(text, "lower", random.Random(0)) == "what films did tom hanks star in?"
    shuffled = perturb(text, "shuffle-case", random.Random(0))
    assert shuffled != text and shuffled.lower() == text.lower()


def test_a_typo_goes_into_the_topic_and_changes_one_letter():
    text = "what films did Tom Hanks star in"
    for seed in range(40):
        typed = typo(text, random.Random(seed), ["Tom Hanks"])
        start = text.index("Tom Hanks")
        assert typed[:start] == text[:start] and typed.endswith(" star in")  # only the name changes
        name = typed[start:len(typed) - len(" star in")]
        assert name != "Tom Hanks"
        if len(name) == len("Tom Hanks"):  # swapped: the same letters, two neighbours exchanged
            assert sorted(name) == sorted("Tom Hanks")
            diff = [i for i, (a, b) in enumerate(zip(name, "Tom Hanks")) if a != b]
            assert len(diff) == 2 and diff[1] == diff[0] + 1
        else:  # dropped: one letter fewer, the rest in order
            assert len(name) == len("Tom Hanks") - 1
            assert any(name == "Tom Hanks"[:i] + "Tom Hanks"[i + 1:] for i in range(9))


def test_a_typo_finds_the_topic_in_any_case_and_else_the_longest_word():
    assert find_span("who directed the matrix", "The Matrix") == (13, 23)
    assert find_span("who directed it", "The Matrix") is None
    typed = typo("who directed the matrix", random.Random(1), ["The Matrix"])
    assert typed.startswith("who directed ") and typed != "who directed the matrix"
    # No topic given: the longest word of five letters or more.
    typed = typo("who wrote Wuthering Heights", random.Random(2))
    assert typed.startswith("who wrote ") and typed.endswith(" Heights") and typed != "who wrote Wuthering Heights"
    assert typo("who is he", random.Random(0)) == "who is he"  # nothing long enough: unchanged


def test_a_typo_goes_into_a_long_word_of_the_name_never_removing_a_word():
    text = "who directed A Sound of Thunder"
    for seed in range(60):
        typed = typo(text, random.Random(seed), ["A Sound of Thunder"])
        assert typed.startswith("who directed A ") and " of " in typed  # short words kept whole
        assert len(typed.split()) == len(text.split()) and typed != text
    assert any(typo(text, random.Random(s), ["A Sound of Thunder"]).endswith(" Thunder") for s in range(60))
    assert any(not typo(text, random.Random(s), ["A Sound of Thunder"]).endswith(" Thunder") for s in range(60))
    # A name of short words only: its longest word takes the typo.
    typed = typo("films of Up", random.Random(0), ["Up"])
    assert typed in ("films of pU", "films of p", "films of U")


def test_no_punctuation_drops_apostrophes_inside_words_and_closes_spaces():
    assert no_punctuation("who wrote Ocean's Eleven?") == "who wrote Oceans Eleven"
    assert no_punctuation("films by T.J. Scott, and Mr. & Mrs. Smith!") == "films by T J Scott and Mr Mrs Smith"


def test_keywords_drop_function_words_but_keep_the_name_whole():
    rng = random.Random(0)
    assert perturb("Who is listed as screenwriter of the A Sound of Thunder director?", "keywords", rng,
                   ["A Sound of Thunder"]) == "listed screenwriter A Sound of Thunder director"
    # Without a known name its words are words like any other; the order stays.
    assert perturb("what is the capital of the region of Ocean's Eleven?", "keywords", rng) == \
        "capital region Ocean's Eleven"
    assert perturb("who is it", "keywords", rng) == "who is it"  # nothing would be left
    assert perturb("what films did Tom Hanks star in", "lower+keywords", rng, ["Tom Hanks"]) == "films tom hanks star"


def test_phrase_drops_function_words_at_either_end_and_never_cuts_the_name():
    rng = random.Random(0)
    assert perturb("what is a movie written by Tom Hanks?", "phrase", rng, ["Tom Hanks"]) == \
        "movie written by Tom Hanks"
    assert perturb("the screenwriter X co-wrote films with who", "phrase", rng, ["X"]) == "screenwriter X co-wrote films"
    # the name's own function words stay: it starts the phrase
    assert perturb("who directed The Who?", "phrase", rng, ["The Who"]) == "directed The Who"
    assert perturb("Tom Hanks directed which films", "phrase", rng, ["Tom Hanks"]) == "Tom Hanks directed which films"
    assert perturb("what is The Thing", "phrase", rng, ["The Thing"]) == "what is The Thing"  # only the name left
    assert perturb("who is it?", "phrase", rng) == "who is it?"
    assert perturb("What films did Tom Hanks star in?", "lower+phrase", rng, ["Tom Hanks"]) == \
        "films did tom hanks star"


def test_filler_puts_chat_words_around_the_question_and_keeps_it_whole():
    from loaders.perturb import CLOSINGS, OPENINGS, TYPED_MIX

    question = "What films did Tom Hanks star in?"
    seen = set()
    for seed in range(60):
        out = perturb(question, "filler", random.Random(seed), ["Tom Hanks"])
        assert "films did Tom Hanks star in" in out and out != question
        opening = next((o for o in OPENINGS if out.startswith(o + " ")), None)
        closing = next((c for c in CLOSINGS if out.endswith(" " + c)), None)
        assert opening or closing
        if opening:  # the question's capital goes, a name's stays
            assert out[len(opening) + 1:].startswith("what films")
        seen.add((opening is not None, closing is not None))
    assert seen == {(True, False), (False, True), (True, True)}
    assert perturb("X-Men cast?", "filler", random.Random(1)).count("X-Men") == 1
    assert "filler" in TYPED_MIX
    # Composes like the others: chat words, then all in lower case.
    assert perturb(question, "filler+lower", random.Random(0)) == perturb(question, "filler", random.Random(0)).lower()


def test_surname_names_a_person_by_the_last_word_and_keeps_other_names():
    rng = random.Random(0)
    assert perturb("what films did Tom Hanks star in", "surname", rng, ["Tom Hanks"]) == "what films did Hanks star in"
    assert surname("who directed films with tom hanks", ["Tom Hanks"]) == "who directed films with Hanks"
    assert surname("films by J. J. Abrams", ["J. J. Abrams"]) == "films by Abrams"
    assert surname("films by Jean-Claude Van Damme", ["Jean-Claude Van Damme"]) == "films by Damme"
    for name in ("Heat", "Ang Li", "European_Parliament_election,_2004_(France)", "the Wizard of Oz",
                 "Mary Kate Olsen Twins", "Rocky 2"):
        text = f"who starred in {name}"
        assert surname(text, [name]) == text  # one word, a short last word, not a person's name
    assert surname("what films did Tom Hanks star in", ["Meg Ryan"]) == "what films did Tom Hanks star in"
    assert check_kinds("lower+surname") == ["lower+surname"]
    assert "surname" not in TYPED_MIX and set(PARTIAL_NAMES_MIX) == set(TYPED_MIX) | {"surname"}
    kinds = {typed_variant("what films did Tom Hanks star in", str(i), 1.0, 0, ["Tom Hanks"], PARTIAL_NAMES_MIX)[1]
             for i in range(200)}
    assert kinds == set(PARTIAL_NAMES_MIX)


def test_kinds_compose_are_checked_and_are_deterministic():
    assert check_kinds("lower, typo,lower+typo,lower") == ["lower", "typo", "lower+typo"]
    assert set(PERTURBATIONS) == {"lower", "typo", "nopunct", "shuffle-case", "keywords", "phrase", "filler", "surname",
                                  "word-typo"}
    assert "word-typo" not in TYPED_MIX  # measured, not trained on: the prior spells such words
    assert "phrase" not in TYPED_MIX  # measured: training on it read search phrases no better
    for bad in ("upper", "lower+caps", ""):
        with pytest.raises(ValueError):
            check_kinds(bad)
    texts = ["what films did Tom Hanks star in", "who directed The Matrix"]
    names = [["Tom Hanks"], ["The Matrix"]]
    once = perturb_all(texts, "lower+typo", seed=3, names=names)
    assert once == perturb_all(texts, "lower+typo", seed=3, names=names)
    assert once == perturb_all(texts[::-1], "lower+typo", seed=3, names=names[::-1])[::-1]  # not order-bound
    assert all(t == t.lower() for t in once)


def test_typed_variant_types_a_share_of_questions_by_their_key():
    texts = [f"what films did Actor Number{i} star in" for i in range(400)]
    typed = [typed_variant(t, str(i), 0.5, names=[f"Actor Number{i}"]) for i, t in enumerate(texts)]
    share = sum(1 for t, kind in typed if kind) / len(typed)
    assert 0.4 < share < 0.6
    assert typed == [typed_variant(t, str(i), 0.5, names=[f"Actor Number{i}"]) for i, t in enumerate(texts)]
    assert all(typed_variant(t, str(i), 0.0) == (t, "") for i, t in enumerate(texts[:20]))


def test_a_word_typo_mistypes_one_question_word_and_never_the_name():
    text = "which films did Tom Hanks star in"
    changed = set()
    for seed in range(60):
        typed = word_typo(text, random.Random(seed), ["Tom Hanks"])
        assert "Tom Hanks" in typed and typed != text
        before, after = text.split(), typed.split()
        assert len(before) == len(after)
        diff = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
        assert len(diff) == 1 and len(before[diff[0]]) >= 4  # one word of four letters or more
        word, typo_word = before[diff[0]], after[diff[0]]
        assert len(typo_word) == len(word) - 1 or sorted(typo_word) == sorted(word)
        changed.add(word)
    assert changed == {"which", "films", "star"}  # any of them, never 'did' or 'in'
    assert perturb(text, "word-typo", random.Random(5), ["Tom Hanks"]) == word_typo(text, random.Random(5),
                                                                                     ["Tom Hanks"])
    assert word_typo("who is X", random.Random(0), ["X"]) == "who is X"  # no word long enough
    assert check_kinds("lower+word-typo+typo") == ["lower+word-typo+typo"]
