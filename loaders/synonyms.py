"""Training templates reworded with WordNet synonyms, so the relation prior reads words its
training questions never used.

A benchmark's questions come from a few templates ("which movies were written by X"); people write
"which films did X pen" or "what pictures is X the screenwriter of". The relation prior is fitted
on the templates alone, so a word none of them has reads as nothing. ``synonym_copies`` gives the
fit a copy of each template with some of its content words swapped for a synonym from WordNet 3.0
(the most frequent sense of each part of speech only, ``loaders/data/wordnet_synonyms.tsv.gz``,
built by ``scripts/wordnet_synonyms.py``; WordNet's licence in ``loaders/data/WORDNET-LICENSE``),
and only for synonyms that no training template uses: a swap never relabels a word the templates
already tie to another relation ("place" and "location" are two relations of some graphs).
"""
from __future__ import annotations

import functools
import gzip
import random
import re
from importlib import resources
from typing import Callable, Sequence

import numpy as np

from loaders.kg import DataError
from loaders.perturb import FUNCTION_WORDS

MIN_LETTERS = 4
"""Words shorter than this are kept (the placeholder 'x', 'film' is the shortest swapped)."""
SUFFIXES = {"": "nvar", "s": "nv", "es": "nv", "ed": "v", "d": "v", "ing": "v"}
"""Endings taken off a word to find its lemma and put back on the synonym ("films" -> "flicks"), with
the parts of speech (WordNet's n, v, a, r) whose synonyms take them ("directed": verbs only)."""
MIN_COSINE = 0.4
"""With a sentence encoder: the least cosine between a word's embedding and a synonym's for the swap.
WordNet's first sense is not always the one a question means ("same" as the Sami people, "actor" as
"histrion", "lies" as falsehoods); MiniLM puts those pairs at 0.07 to 0.20, "films" and "flicks"
at 0.55, "written" and "penned" at 0.79."""
WORD = re.compile(r"[a-z]+")


@functools.lru_cache(maxsize=1)
def synonym_table() -> dict[str, dict[str, tuple[str, ...]]]:
    """lemma -> part of speech -> the other words of the lemma's most frequent WordNet sense in that
    part (multi-word ones with spaces)."""
    where = resources.files("loaders").joinpath("data", "wordnet_synonyms.tsv.gz")
    try:
        lines = gzip.decompress(where.read_bytes()).decode("utf-8").splitlines()
        table = {}
        for line in lines:
            lemma, *parts = line.split("\t")
            table[lemma] = {part[0]: tuple(w.replace("_", " ") for w in part[2:].split()) for part in parts}
    except (OSError, EOFError, UnicodeDecodeError, IndexError) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"the packaged WordNet synonym table {where} is missing or damaged "
                        f"({type(exc).__name__}): reinstall seeder-dgl, or rebuild it with scripts/wordnet_synonyms.py"
                        ) from None
    if not table:
        raise DataError(f"the packaged WordNet synonym table {where} is empty: reinstall seeder-dgl")
    return table


IRREGULAR = frozenset("""
am are be became become been began begun being belong bought brought built came caught chose chosen did does done
drawn drew driven drove else fell felt flew flown fought found gave given got gotten grew grown had has heard
held keyword kept knew known led left lost made meant met other others paid ran rose said sang sat saw seen sent set
shot sold sought spent spoke spoken stole stood sung taken taught thought threw thrown told took went won wore
worn wrote
""".split())
"""English words the table and its inflections miss: irregular forms of common verbs, and a few words
that have no synonym in WordNet's sense of them."""
ENDINGS = ("s", "es", "ed", "d", "ing", "er", "ers", "ly")
"""Regular endings ``is_english`` takes off a word to find it in the table."""


@functools.lru_cache(maxsize=1)
def english_words() -> frozenset[str]:
    """The single words of the packaged WordNet table (its lemmas and their synonyms), English
    function words (``loaders.perturb.FUNCTION_WORDS``) and ``IRREGULAR``."""
    words = set(synonym_table())
    for parts in synonym_table().values():
        words.update(w for ws in parts.values() for w in ws if WORD.fullmatch(w))
    return frozenset(words | FUNCTION_WORDS | IRREGULAR)


def is_english(word: str) -> bool:
    """Whether ``word`` (lower case) is an English word of ``english_words`` or a regular inflection of
    one ("films", "directed", "featuring", "categories", "penned"). A typo ("dirceted", "fims") is
    rarely one."""
    known = english_words()
    if word in known:
        return True
    for ending in ENDINGS:
        stem = word[: len(word) - len(ending)]
        if word.endswith(ending) and len(stem) > 1 and (
                stem in known or (ending in ("ing", "er", "ers") and stem + "e" in known)):  # "featuring"
            return True
    if word.endswith(("ies", "ied")) and word[:-3] + "y" in known:
        return True
    for ending in ("ed", "ing"):  # a doubled consonant: "penned", "getting"
        stem = word[: len(word) - len(ending)]
        if word.endswith(ending) and len(stem) > 2 and stem[-1] == stem[-2] and stem[:-1] in known:
            return True
    return False


SHORT_CLOSED = re.compile(r"[^aeiou]*[aeiou][^aeiouwxy]")
"""One syllable ending in a single vowel and a consonant: the consonant doubles ("get" -> "getting")."""


def _inflect(word: str, suffix: str) -> str:
    """``word`` (a lemma) with the ending ``suffix`` by English spelling's regular rules."""
    consonant_y = len(word) > 1 and word.endswith("y") and word[-2] not in "aeiou"
    if suffix in ("ed", "d"):
        if word.endswith("e"):
            return word + "d"
        if consonant_y:
            return word[:-1] + "ied"
        return word + (word[-1] if SHORT_CLOSED.fullmatch(word) else "") + "ed"
    if suffix == "ing":
        if word.endswith("ie"):
            return word[:-2] + "ying"
        if word.endswith("e") and not word.endswith(("ee", "oe", "ye")):
            return word[:-1] + "ing"
        return word + (word[-1] if SHORT_CLOSED.fullmatch(word) else "") + "ing"
    if suffix in ("s", "es"):
        if consonant_y:
            return word[:-1] + "ies"
        return word + ("es" if word.endswith(("s", "x", "z", "ch", "sh")) else "s")
    return word


def _inflect_phrase(phrase: str, suffix: str, part: str) -> str:
    words = phrase.split(" ")
    at = 0 if part == "v" else len(words) - 1  # "turned up", "motion pictures"
    words[at] = _inflect(words[at], suffix)
    return " ".join(words)


def inflected_synonyms(word: str, table: dict[str, dict[str, tuple[str, ...]]]) -> list[str]:
    """The synonyms of ``word``'s lemma, inflected as ``word`` is ("films" -> "movies", "flicks")."""
    out = []
    for suffix, parts in SUFFIXES.items():
        stem = word[: len(word) - len(suffix)]
        if word.endswith(suffix) and stem in table:
            out += [_inflect_phrase(s, suffix, part) for part, words in table[stem].items() if part in parts
                    for s in words]
    return list(dict.fromkeys(out))


def synonym_options(texts: Sequence[str], embed: Callable[[list[str]], np.ndarray] | None = None,
                    min_cosine: float = MIN_COSINE) -> dict[str, list[str]]:
    """word -> the synonyms it may be swapped for, for each word of ``MIN_LETTERS`` or more of
    ``texts`` (lower case) that is not a function word: those of its synonyms that no text uses
    (inflected as the word is), and with ``embed`` only those whose embedding and the word's have a
    cosine of at least ``min_cosine``."""
    table = synonym_table()
    seen = {w for t in texts for w in WORD.findall(t)}
    options = {w: [s for s in inflected_synonyms(w, table) if not any(p in seen for p in s.split(" "))]
               for w in sorted(seen) if len(w) >= MIN_LETTERS and w not in FUNCTION_WORDS}
    return _alike(options, embed, min_cosine) if embed is not None else options


def swap_synonyms(text: str, options: dict[str, list[str]], share: float, rng: random.Random,
                  keep: Sequence[tuple[int, int]] = ()) -> str:
    """``text`` with each word of ``options`` swapped, with probability ``share`` (drawn from
    ``rng``), for one of its options; words inside a ``keep`` span (start, end), e.g. the topic's
    name, stay as written."""

    def swap(match: re.Match) -> str:
        word = match.group(0)
        if len(word) < MIN_LETTERS or word in FUNCTION_WORDS or rng.random() >= share:
            return word
        if any(lo < match.end() and match.start() < hi for lo, hi in keep):
            return word
        return rng.choice(options[word]) if options.get(word) else word

    return WORD.sub(swap, text)


def synonym_copies(templates: Sequence[str], share: float, seed: int = 0,
                   embed: Callable[[list[str]], np.ndarray] | None = None,
                   min_cosine: float = MIN_COSINE) -> list[tuple[int, str]]:
    """(index, copy) for each of ``templates`` (lower case, as ``question_template`` writes them)
    whose copy differs: each word of ``MIN_LETTERS`` or more that is not a function word is swapped,
    with probability ``share``, for one of its synonyms that no template in ``templates`` uses
    (chosen at random, inflected as the word was). With ``embed`` (texts -> embeddings, the
    dataset's sentence encoder) a synonym is kept only where its embedding and the word's have a
    cosine of at least ``min_cosine``. Deterministic given ``seed``, the list and ``embed``."""
    if share <= 0 or not templates:
        return []
    options = synonym_options(templates, embed, min_cosine)
    rng = random.Random(f"synonyms:{seed}")
    copies = []
    for i, template in enumerate(templates):
        copy = swap_synonyms(template, options, share, rng)
        if copy != template:
            copies.append((i, copy))
    return copies


def _alike(options: dict[str, list[str]], embed: Callable[[list[str]], np.ndarray],
           min_cosine: float) -> dict[str, list[str]]:
    texts = sorted({w for w, o in options.items() if o} | {s for o in options.values() for s in o})
    if not texts:
        return options
    vectors = np.asarray(embed(texts), dtype=np.float64)
    vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    row = {t: i for i, t in enumerate(texts)}
    return {w: [s for s in o if float(vectors[row[w]] @ vectors[row[s]]) >= min_cosine] for w, o in options.items()}
