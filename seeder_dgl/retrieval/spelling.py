"""A question's own words spelled as the training questions spell them, before the relation prior reads them.

People mistype the words of a question as well as its names: "who dirceted X", "what fims did X
act in". The entity linker finds a misspelled name within a typo, but the relation prior reads the
template's words through the encoder's word pieces, and a misspelled word is other pieces: on
MetaQA's validation questions one typo in a question word (not the name) took SeedER's Hit@1 from
0.96 / 0.995 / 0.99 to 0.725 / 0.83 / 0.835 at 1 / 2 / 3 hops. So the prior keeps the words of the
templates it was fitted on (``TemplateWords``), and a template word it has never seen, of
``MIN_LETTERS`` letters or more, is read as the most frequent of those words within one edit
(a letter dropped, added or changed, or two neighbours swapped). A word with no such neighbour is
left as typed, and so is an English word (``loaders.synonyms.is_english``): a rewording's new words
reach the encoder as written. Without that check MetaQA's 206 template words read "what year did
X come out" as "... some out" (Hit@1 1.0 to 0.125 on that rewording).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterable, Mapping

from rapidfuzz.distance import OSA
from rapidfuzz.process import extractOne

from loaders.synonyms import is_english

WORD = re.compile(r"(?<![\w'’-])[^\W\d_]+(?![\w'’-])")
"""A template word: a run of letters standing alone (templates are case-folded,
``linking.question_template``). A run joined to others by '_', '-', an apostrophe or digits is part
of a name written that way ('productsg_g3_stylus', 'post-impressionist'), not a word of the question."""
MIN_LETTERS = 4
"""Letters an unknown word needs before it is read as a known one: shorter words have many
neighbours within one edit ("wat": "what", "was", "war")."""
MIN_COUNT = 2
"""Occurrences in the fitted templates a word needs to be kept: once is as likely a typo as a word."""
MAX_WORDS = 50_000
"""Most words kept (the most frequent): the prior's JSON stays small on any graph."""


@dataclass(frozen=True)
class TemplateWords:
    """The words of the templates a relation prior was fitted on, with how often each occurs."""

    counts: Mapping[str, int]
    _known: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # By length, each most frequent first, then alphabetical: the order the nearest word is chosen in.
        by_length: dict[int, list[str]] = {}
        for w in sorted(self.counts, key=lambda w: (-self.counts[w], w)):
            by_length.setdefault(len(w), []).append(w)
        object.__setattr__(self, "_known", {n: tuple(ws) for n, ws in by_length.items()})
        object.__setattr__(self, "nearest", lru_cache(maxsize=1 << 14)(self._nearest))

    def __reduce__(self):  # the memory of words looked up is not pickled (processes, deep copies)
        return type(self), (dict(self.counts),)

    @classmethod
    def of(cls, templates: Iterable[str], min_count: int = MIN_COUNT, max_words: int = MAX_WORDS) -> "TemplateWords":
        counts = Counter(w for t in templates for w in WORD.findall(str(t).casefold()))
        kept = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))[:max_words]
        return cls({w: int(counts[w]) for w in sorted(kept)})

    def _nearest(self, word: str) -> str:
        """``word`` if known, short or an English word, else the most frequent known word within one
        edit, else ``word``."""
        if word in self.counts or len(word) < MIN_LETTERS or is_english(word):
            return word
        # OSA: a swap of two neighbours is one edit, as people mistype. Within one edit a word is one
        # letter longer or shorter at most; extractOne returns the first choice at the best distance,
        # and each length's words are ordered most frequent first.
        found = [extractOne(word, self._known.get(n, ()), scorer=OSA.distance, score_cutoff=1)
                 for n in (len(word) - 1, len(word), len(word) + 1)]
        close = [f[0] for f in found if f is not None]
        return min(close, key=lambda w: (-self.counts[w], w)) if close else word

    def spell(self, template: str) -> str:
        """``template`` with each unknown word of ``MIN_LETTERS`` letters or more replaced by its
        nearest known word (``nearest``); everything else as it was."""
        return WORD.sub(lambda m: self.nearest(m.group()), template)

    def to_dict(self) -> dict[str, int]:
        return dict(self.counts)
