"""Questions as people type them: lower case, a typo in a name, no punctuation, random letter case.

Benchmarks write their questions in proper case with names spelled as the graph spells them;
people do not. These perturbations turn a question into a typed one, deterministically from a
seed, so that ``eval --perturb`` can score both side by side and training can mix typed
questions in (``TYPED_MIX``).

- ``lower``: every letter in lower case ("what films did tom hanks star in").
- ``typo``: one typo in the question's topic entity: two neighbouring letters swapped or one
  letter dropped ("Tom Hnaks"). Where the topic is not known, in the question's longest word of
  five letters or more (names are usually the long words); a question with neither is kept.
- ``nopunct``: punctuation removed ("Oceans Eleven", "Mr  Mrs Smith" with its spaces closed).
- ``shuffle-case``: each letter's case chosen at random ("wHat FiLMs").
- ``keywords``: typed into a search box: the question's function words (articles, prepositions,
  auxiliaries, question words) and punctuation dropped, the topic entity's name kept whole where
  the dataset marks it ("movies Tom Hanks star").
- ``phrase``: typed into a search box as a phrase: the words before the first content word and
  after the last one (question words, auxiliaries, articles: ``FUNCTION_WORDS``) and the
  punctuation at either end dropped, the rest as written ("what is a movie written by Tom Hanks?"
  -> "movie written by Tom Hanks"); the topic entity's name is never cut.
- ``filler``: asked as in a chat, with words around the question: an opening ("can you tell me
  what films did Tom Hanks star in"), a closing ("... please") or both, from ``OPENINGS`` and
  ``CLOSINGS``.
- ``surname``: a name of two or three words, each capitalised, named by its last word alone, as
  people name a person by the surname ("what films did Hanks star in"); other names are kept.
- ``word-typo``: one typo in a word of the question outside the topic's name ("who dirceted
  Deadfall"); the relation prior reads it as the word it fitted within a typo (``retrieval.spelling``).

Kinds compose with ``+``: ``lower+typo`` is a lower-case question with a typo in its name.
"""
from __future__ import annotations

import random
import re
import unicodedata
from typing import Sequence

PERTURBATIONS = ("lower", "typo", "nopunct", "shuffle-case", "keywords", "phrase", "filler", "surname", "word-typo")
"""The single kinds ``perturb`` knows (compose them with '+')."""

TYPED_MIX = ("lower", "typo", "lower+typo", "nopunct", "shuffle-case", "keywords", "filler")
"""The kinds training mixes in, one drawn per perturbed question. With ``keywords`` left out, MLPQ's
validation questions typed as keywords scored Hit@1 0.713 against 0.871 as written: the relation
prior and the policy had only read whole sentences. With ``filler`` left out, MetaQA's 3-hop
validation questions with chat words around them ("hi, ...?", "i was wondering ...", "... thanks":
none of them in ``OPENINGS`` or ``CLOSINGS``) scored 0.845 to 0.910 against 0.987 as written, and
"... thanks" 0.520 at 1 hop.

``phrase`` is measured, not mixed in: trained with it (MetaQA and MLPQ, one run each) every typed
form of ``eval --perturb`` moved by 0.007 at most, ``phrase`` itself 0.988 against 0.986 (MLPQ
0.907 against the checkpoint without it), and MetaQA's validation questions asked as search phrases
of ``benchmarks/phrased_metaqa.py`` read no better (0.873 / 0.897 at 1 / 2 hops against 0.885 /
0.920): "movies written by X" stayed a two-hop question to the prior, which had "movie written by X"
as one hop only in the singular."""
PARTIAL_NAMES_MIX = TYPED_MIX + ("surname",)
"""The training mix where the profile links names by their last word too (``partial_names``)."""

OPENINGS = ("can you tell me", "could you please tell me", "please tell me", "i'd like to know",
            "i want to know", "do you know", "tell me", "hey,", "quick question:", "help me find out",
            "any idea", "so", "ok,", "question:")
"""What ``filler`` may put before a question (generic chat, no dataset's words)."""
CLOSINGS = ("please", "thank you", "thx", "pls", "if you know", "any idea?", "cheers", "asap")
"""What ``filler`` may put after it."""

MIN_TYPO_WORD = 5
"""Letters a word needs before it gets a typo when the topic entity is not known."""
MIN_WORD_TYPO = 4
"""Letters a question word needs before ``word-typo`` mistypes it ("what", "films", "directed")."""

FUNCTION_WORDS = frozenset("""
a an the of in on at to by for from with as into about and or is are was were be been being do does
did has have had what which who whom whose where when why how that this these those it its there
their they can could would should will me tell please
""".split())
"""The words ``keywords`` drops (English function words and question words, in lower case)."""


def check_kinds(kinds: str | Sequence[str]) -> list[str]:
    """``kinds`` (a comma list, or a sequence) as a list; a one-line ValueError for an unknown one."""
    items = [k.strip() for k in (kinds.split(",") if isinstance(kinds, str) else kinds) if k.strip()]
    for kind in items:
        for part in kind.split("+"):
            if part not in PERTURBATIONS:
                raise ValueError(f"unknown perturbation {part!r}: choose from {', '.join(PERTURBATIONS)} "
                                 "(combine them with '+', e.g. lower+typo)")
    if not items:
        raise ValueError(f"no perturbation given: choose from {', '.join(PERTURBATIONS)}")
    return list(dict.fromkeys(items))


def find_span(text: str, name: str) -> tuple[int, int] | None:
    """Where ``name`` occurs in ``text`` as whole words, ignoring case and the characters between
    words; None when it does not."""
    words = re.findall(r"\w+", name)
    if not words:
        return None
    pattern = r"(?<!\w)" + r"\W+".join(re.escape(w) for w in words) + r"(?!\w)"
    match = re.search(pattern, text, flags=re.IGNORECASE)
    return (match.start(), match.end()) if match else None


def _longest(words: Sequence[re.Match]) -> re.Match:
    """The longest of ``words``, the first of equals."""
    return max(words, key=lambda m: (len(m.group()), -m.start()))


def _name_span(text: str, names: Sequence[str]) -> tuple[int, int] | None:
    """Where the longest of ``names`` found in ``text`` stands (``find_span``); None when none is."""
    for name in sorted((n for n in names if n), key=len, reverse=True):
        span = find_span(text, name)
        if span is not None:
            return span
    return None


def _typo_span(text: str, names: Sequence[str]) -> tuple[int, int] | None:
    span = _name_span(text, names)
    if span is not None:
        return span
    words = [m for m in re.finditer(r"[^\W\d_]+", text) if len(m.group()) >= MIN_TYPO_WORD]
    if not words:
        return None
    longest = _longest(words)
    return longest.start(), longest.end()


def typo(text: str, rng: random.Random, names: Sequence[str] = ()) -> str:
    """One typo in the first of ``names`` found in ``text`` (else in its longest word): two
    neighbouring letters swapped, or one dropped, inside one of the name's words of
    ``MIN_TYPO_WORD`` letters or more (else its longest word), as people mistype names: a dropped
    'A' in 'A Sound of Thunder' would remove a word, not make a typo."""
    span = _typo_span(text, names)
    if span is None:
        return text
    start, end = span
    words = list(re.finditer(r"[^\W\d_]+", text[start:end]))
    if not words:
        return text
    long_words = [m for m in words if len(m.group()) >= MIN_TYPO_WORD]
    word = rng.choice(long_words) if long_words else _longest(words)
    if len(word.group()) < 2:
        return text
    return _mistype(text, start + word.start(), start + word.end(), rng)


def _mistype(text: str, start: int, end: int, rng: random.Random) -> str:
    """``text`` with the word at ``start:end`` mistyped: two neighbouring letters swapped (half the
    time, where two differ) or one letter dropped."""
    letters = list(range(start, end))
    swaps = [i for i in letters if i + 1 < end and text[i].lower() != text[i + 1].lower()]
    if swaps and rng.random() < 0.5:
        i = rng.choice(swaps)
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    i = rng.choice(letters)
    return text[:i] + text[i + 1:]


def word_typo(text: str, rng: random.Random, names: Sequence[str] = ()) -> str:
    """One typo in a word of the question outside the first of ``names`` found in it: a word of
    ``MIN_WORD_TYPO`` letters or more ("who dirceted X", "whcih films"), chosen at random; ``text``
    as it is when it has none."""
    span = _name_span(text, names)
    words = [m for m in re.finditer(r"[^\W\d_]+", text) if len(m.group()) >= MIN_WORD_TYPO
             and (span is None or m.end() <= span[0] or m.start() >= span[1])]
    if not words:
        return text
    word = rng.choice(words)
    return _mistype(text, word.start(), word.end(), rng)


def no_punctuation(text: str) -> str:
    """``text`` without punctuation (Unicode category P), spaces closed up."""
    kept = "".join(" " if unicodedata.category(c).startswith("P") and c not in "'’" else
                   ("" if c in "'’" else c) for c in text)
    return " ".join(kept.split())


def keywords(text: str, names: Sequence[str] = ()) -> str:
    """``text`` as search keywords: its words outside the first of ``names`` found in it, less
    ``FUNCTION_WORDS``, and that name as written; kept as it is when nothing would be left."""
    span = _name_span(text, names)
    start, end = span if span is not None else (len(text), len(text))

    def words(part: str) -> list[str]:
        return [w for w in re.findall(r"[^\W_]+(?:['’][^\W_]+)*", part) if w.lower() not in FUNCTION_WORDS]

    kept = words(text[:start]) + ([text[start:end]] if span is not None else []) + words(text[end:])
    return " ".join(kept) if kept else text


def phrase(text: str, names: Sequence[str] = ()) -> str:
    """``text`` as a search phrase: the words of ``FUNCTION_WORDS`` at its start and end, and the
    punctuation there, dropped; never into the first of ``names`` found in it. ``text`` as it is
    when nothing would be left but that name."""
    span = _name_span(text, names)
    lo, hi = (span if span is not None else (len(text), 0))
    words = [m for m in re.finditer(r"[^\W_]+(?:['’][^\W_]+)*", text)]
    content = [m for m in words if m.group().lower() not in FUNCTION_WORDS or (m.start() < hi and m.end() > lo)]
    if not content:
        return text
    start, end = min(content[0].start(), lo), max(content[-1].end(), hi if span is not None else 0)
    if span is not None and (start, end) == span:
        return text
    return text[start:end]


def with_filler(text: str, rng: random.Random) -> str:
    """``text`` with an opening from ``OPENINGS``, a closing from ``CLOSINGS``, or both (a third of the
    time each); an opening takes the question's capital and its final question mark goes."""
    body = text.strip()
    where = rng.randrange(3)
    if where != 1:  # an opening
        if body[:1].isupper() and body[1:2].islower():  # 'What films ...', not a name like 'X-Men'
            body = body[0].lower() + body[1:]
        body = f"{rng.choice(OPENINGS)} {body.rstrip('?').rstrip()}"
    if where != 0:  # a closing
        body = f"{body.rstrip('?').rstrip()} {rng.choice(CLOSINGS)}"
    return body


NAME_WORD = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")
"""A word of a person's name: letters, with inner apostrophes or hyphens ("O'Neil", "Jean-Luc")."""


def surname(text: str, names: Sequence[str] = ()) -> str:
    """``text`` with the first of ``names`` found in it named by its last word: names of two or
    three words, each capitalised, with nothing but spaces and periods between them ("Tom Hanks",
    "J. J. Abrams"), whose last word has three letters or more; ``text`` as it is otherwise."""
    for name in sorted((n for n in names if n), key=len, reverse=True):
        words = NAME_WORD.findall(name)
        if not 2 <= len(words) <= 3 or len(words[-1]) < 3 or not all(w[0].isupper() for w in words):
            continue
        if re.sub(r"[\s.]", "", name) != "".join(words):
            continue
        span = find_span(text, name)
        if span is not None:
            return text[:span[0]] + words[-1] + text[span[1]:]
    return text


def shuffle_case(text: str, rng: random.Random) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in text)


def perturb(text: str, kind: str, rng: random.Random, names: Sequence[str] = ()) -> str:
    """``text`` perturbed by ``kind`` (one of ``PERTURBATIONS`` or several joined by '+', applied
    left to right); ``names``: the topic entity's names, where the typo goes."""
    for part in kind.split("+"):
        if part == "lower":
            text = text.lower()
        elif part == "typo":
            text = typo(text, rng, names)
        elif part == "nopunct":
            text = no_punctuation(text)
        elif part == "shuffle-case":
            text = shuffle_case(text, rng)
        elif part == "keywords":
            text = keywords(text, names)
        elif part == "phrase":
            text = phrase(text, names)
        elif part == "filler":
            text = with_filler(text, rng)
        elif part == "surname":
            text = surname(text, names)
        elif part == "word-typo":
            text = word_typo(text, rng, names)
        else:
            raise ValueError(f"unknown perturbation {part!r}: choose from {', '.join(PERTURBATIONS)}")
    return text


def perturb_all(texts: Sequence[str], kind: str, seed: int = 0,
                names: Sequence[Sequence[str]] | None = None) -> list[str]:
    """Every text perturbed by ``kind``, each from a random stream seeded by ``seed``, the kind and
    the text itself: a question is typed the same way whichever sample or order it is in."""
    out = []
    for i, text in enumerate(texts):
        rng = random.Random(f"{seed}:{kind}:{text}")
        out.append(perturb(text, kind, rng, names[i] if names is not None else ()))
    return out


def typed_variant(text: str, key: str, share: float, seed: int = 0, names: Sequence[str] = (),
                  mix: Sequence[str] = TYPED_MIX) -> tuple[str, str]:
    """The question as training sees it: with probability ``share`` (drawn from ``key``, e.g. the
    question id, and ``seed``) a perturbation of it drawn from ``mix``, else the text itself.
    Returns (text, kind), kind '' for the text as written."""
    rng = random.Random(f"typed:{seed}:{key}")
    if rng.random() >= share:
        return text, ""
    kind = rng.choice(mix)
    return perturb(text, kind, rng, names), kind
