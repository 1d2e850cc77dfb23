"""The full-text name index as a question is put to it: Lucene's query syntax for a question's words.

Neo4j's full-text index on node names (``schema/*_index.cypher``) is Lucene's: a question becomes an
OR of its words, escaped, the longer ones fuzzy (within one or two edits), so a name is found
whatever its case, with a typo or without its apostrophe. What the matches mean, which span of
the question a name stands for and which candidate is the topic, is ``retrieval.linking``'s.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

WORD = re.compile(r"[^\W_]+(?:['’`][^\W_]+)*")
"""A question word: letters and digits, inner apostrophes kept in one word ("O'Malley")."""
APOSTROPHES = str.maketrans("", "", "'’`")
"""``str.translate`` table dropping apostrophes: names are matched without them."""
_LUCENE_SPECIAL = re.compile(r'([+\-!(){}\[\]^"~*?:\\/&|])')
MAX_TERMS = 64
"""Question words sent to the name index (and matched against names)."""
FUZZY_TERM = 4
"""Question words of this many letters or more also match index terms within one edit ..."""
FUZZY_TERM_TWO = 8
"""... and of this many, within two (Lucene's fuzzy query allows at most two)."""
CANDIDATES = 100
"""Full-text hits a question's linking scores."""
# Lucene's English stop words (the 'standard' analyzer drops them from names): sent as plain
# terms, never fuzzy ("with~1" would match 'wish' and 'witt').
STOP_WORDS = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their "
                       "then there these they this to was will with".split())


def fold(text: str) -> str:
    """Case and accents folded: 'Amélie' -> 'amelie', 'Straße' -> 'strasse'."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


POSSESSIVE = re.compile(r"['’`][sS]$")
"""A possessive ending of a question word ("Paul's"): a name may end before it."""
_CHUNK = re.compile(r"\w(?:[\w'.]*\w)?")
"""A word as Lucene's standard tokenizer keeps it: underscores, inner periods and apostrophes inside
('Virginia_gubernatorial_election', 'T.J', "O'Malley"), so a name written that way is one term."""
JOINED_WORDS = 4
"""Longest run of question words joined with '_' into one term (``NameQuery.joined``)."""


def _term(word: str, plain: frozenset[str], most_edits: int = 2) -> str:
    escaped = _LUCENE_SPECIAL.sub(r"\\\1", word)
    letters = len(word.translate(APOSTROPHES))
    if word in STOP_WORDS or letters < FUZZY_TERM or fold(word.translate(APOSTROPHES)) in plain:
        return escaped
    return f"{escaped}~{min(1 if letters < FUZZY_TERM_TWO else 2, most_edits)}"


@dataclass(frozen=True)
class NameQuery:
    """How a dataset's questions are put to its name index (``lucene``)."""

    plain: frozenset[str] = frozenset()
    """Words asked exactly, never within a typo: the words a dataset's questions use rather than
    its names (``EntityLinker.plain_words``). Fuzzy, 'films' would bring every 'Film', 'Fils' and
    'Flims' along, and cost a third of the query."""
    joined: bool = False
    """Also ask runs of 2 to ``JOINED_WORDS`` question words joined with '_', exactly, those that
    neither start nor end with a stop word or a plain word: the index keeps a name like
    'Virginia_gubernatorial_election' as one term, which a question typed with spaces reaches only
    so (set for datasets whose names are written that way, ``EntityLinker.joined_names``)."""

    def lucene(self, question: str) -> str:
        """An OR of the question's words, each escaped, those of ``FUZZY_TERM`` letters or more fuzzy
        unless stop words or ``plain``; then each word as the index's tokenizer keeps it where that
        differs ('t.j', 'virginia_gubernatorial_election'); then, with ``joined``, runs of words
        joined by '_'. '' when nothing searchable remains.

        Words are sent in lower case: the analyzer lower-cases anyway, and AND / OR / NOT in a
        question must not become Lucene operators.
        """
        words = [m.group().lower() for m in list(WORD.finditer(question))[:MAX_TERMS]]
        terms = [_term(w, self.plain) for w in words]
        seen = set(words)
        for w in words:  # "paul's" also as "paul": asked only as written, 'Paul' scored as a typo of it
            bare = POSSESSIVE.sub("", w)
            if bare != w and bare not in seen:
                seen.add(bare)
                terms.append(_term(bare, self.plain))
        for m in list(_CHUNK.finditer(question))[:MAX_TERMS]:
            chunk = m.group().lower()
            if chunk not in seen:
                seen.add(chunk)
                # A name typed joined ('saison_5_de_game_of_thrones') within one edit: within two, its
                # long term cost Lucene half of the question's lookup (MLPQ: 21.5 against 10.3 ms),
                # and the name-words index matches each of its words within a typo anyway.
                terms.append(_term(chunk, self.plain, 1 if "_" in chunk else 2))
        if self.joined:  # exactly: fuzzy, dozens of long terms cost ten times the rest of the query
            ends = [w not in STOP_WORDS and fold(w.translate(APOSTROPHES)) not in self.plain for w in words]
            for i in range(len(words)):
                for size in range(2, JOINED_WORDS + 1):
                    if i + size <= len(words) and ends[i] and ends[i + size - 1]:
                        terms.append(_LUCENE_SPECIAL.sub(r"\\\1", "_".join(words[i:i + size])))
        return " ".join(terms)

    def words(self, question: str) -> str:
        """The name-words index's query (``schema/words_index.cypher``, set for datasets whose names
        are joined): the question's letter runs of two letters or more, split at every other
        character as that index's 'stop' analyzer splits names, without stop words (it keeps none)
        and without digits (it keeps none), each escaped and fuzzy as in ``lucene``. '' when none."""
        runs = [w.lower() for w in _LETTERS.findall(question)[:MAX_TERMS]]
        return " ".join(_term(w, self.plain) for w in dict.fromkeys(runs) if len(w) > 1 and w not in STOP_WORDS)


_LETTERS = re.compile(r"[^\W\d_]+")
"""A run of letters: a term as the 'stop' analyzer keeps it."""


def lucene_query(question: str, plain: frozenset[str] = frozenset()) -> str:
    """``NameQuery(plain).lucene(question)``: the name-index query of a question."""
    return NameQuery(frozenset(plain)).lucene(question)
