"""Build ``loaders/data/wordnet_synonyms.tsv.gz`` from a WordNet 3.0 database folder.

    python scripts/wordnet_synonyms.py /usr/share/wordnet    # Debian's wordnet-base, or the
                                                              # Princeton tarball's dict/ folder

One line per lemma of four or more lower-case letters: the lemma, then for each part of speech
(n, v, a, r) with synonyms a tab, the part's letter, ':' and the other words of the lemma's most
frequent sense in it (multi-word ones joined by ``_``), space-separated.
A part of speech the lemma rarely takes in WordNet's tagged texts (fewer than a tenth of the
tags of its most tagged part, or none) is left out: "same" is tagged as an adjective, and its
first noun sense is the Sami people. Only the first sense: the rarer senses of common words ("lies" as falsehoods, "place" as a verb)
are what made wider tables misread the training templates (benchmarks/README.md, 2026-11-27).
"""
from __future__ import annotations

import gzip
import re
import sys
from pathlib import Path

PARTS = ("noun", "verb", "adj", "adv")
LETTER = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}
OUT = Path(__file__).resolve().parents[1] / "loaders" / "data" / "wordnet_synonyms.tsv.gz"


def synset_words(folder: Path) -> dict[tuple[str, str], list[str]]:
    words = {}
    for part in PARTS:
        for line in (folder / f"data.{part}").open(encoding="latin-1"):
            if line.startswith("  "):  # the licence at the top of each file
                continue
            fields = line.split()
            count = int(fields[3], 16)
            words[(part, fields[0])] = [fields[4 + 2 * i].lower().split("(")[0] for i in range(count)]
    return words


def first_sense_synonyms(folder: Path) -> dict[str, dict[str, list[str]]]:
    words = synset_words(folder)
    table: dict[str, dict[str, list[str]]] = {}
    tagged: dict[str, dict[str, int]] = {}
    for part in PARTS:
        for line in (folder / f"index.{part}").open(encoding="latin-1"):
            if line.startswith("  "):
                continue
            fields = line.split()
            lemma, pointer_kinds = fields[0], int(fields[3])
            if not re.fullmatch(r"[a-z]{4,}", lemma):
                continue
            tagged.setdefault(lemma, {})[LETTER[part]] = int(fields[4 + pointer_kinds + 1])
            first = fields[4 + pointer_kinds + 2]  # synset offsets follow, most frequent sense first
            synonyms = [w for w in words[(part, first)] if w != lemma and re.fullmatch(r"[a-z][a-z_\-']*", w)]
            if synonyms:
                table.setdefault(lemma, {})[LETTER[part]] = synonyms
    for lemma, parts in list(table.items()):
        most = max(tagged[lemma].values())
        kept = {p: w for p, w in parts.items() if most == 0 or tagged[lemma][p] >= max(1, most / 10)}
        if kept:
            table[lemma] = kept
        else:
            del table[lemma]
    return table


def main(folder: str) -> None:
    table = first_sense_synonyms(Path(folder))
    tmp = OUT.with_suffix(".tmp")
    with gzip.GzipFile(tmp, "wb", compresslevel=9, mtime=0) as raw:  # mtime 0: the same bytes every build
        raw.write("".join(lemma + "".join(f"\t{part}:{' '.join(words)}" for part, words in parts.items()) + "\n"
                          for lemma, parts in sorted(table.items())).encode())
    tmp.replace(OUT)
    print(f"{len(table)} lemmas -> {OUT}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/usr/share/wordnet")
