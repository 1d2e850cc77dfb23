"""MetaQA loader: triples, types, questions, splits; the real counts when ../shared is here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from loaders.metaqa import (HOP_ID_BASE, MetaQAFormatError, load_metaqa, load_metaqa_kb, load_metaqa_qa_file,
                            split_ids)

SHARED_METAQA = Path(__file__).resolve().parents[3] / "shared" / "data" / "metaqa"

KB = """Kismet|directed_by|William Dieterle
Kismet|written_by|Edward Knoblock
Kismet|release_year|1944
Kismet|release_year|1944
Kismet|has_tags|bd-r
Kismet|starred_actors|Marlene Dietrich
Flesh and Fantasy|directed_by|Julien Duvivier
Flesh and Fantasy|starred_actors|Edward G. Robinson
Flesh and Fantasy|written_by|Julien Duvivier
Flesh and Fantasy|has_tags|Julien Duvivier
Flesh and Fantasy|release_year|1943
Flesh and Fantasy|in_language|English
Witness|has_tags|Kismet
"""

DEV_1 = """what movies did [William Dieterle] direct\tKismet
which person directed [Flesh and Fantasy]\tJulien Duvivier
when was [Kismet] released\t1944|Unheard Of
"""
QTYPE_1 = "director_to_movie\nmovie_to_director\nmovie_to_year\n"
DEV_2 = "the films directed by [Julien Duvivier] were in which languages\tEnglish\n"
QTYPE_2 = "director_to_movie_to_language\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "kb.txt").write_text(KB)
    for hop, dev, qtype in ((1, DEV_1, QTYPE_1), (2, DEV_2, QTYPE_2)):
        folder = tmp_path / "qa" / f"{hop}-hop"
        folder.mkdir(parents=True)
        (folder / "dev.txt").write_text(dev)
        (folder / "dev_qtype.txt").write_text(qtype)
    return tmp_path


def test_kb_ids_types_and_duplicates(root):
    kg, duplicates = load_metaqa_kb(root / "kb.txt")
    assert duplicates == 1
    assert kg.num_edges == 12
    # Ids in first-seen order, head before tail.
    assert kg.node_names[:4] == ["Kismet", "William Dieterle", "Edward Knoblock", "1944"]
    types = {name: kg.node_type_names[t] for name, t in zip(kg.node_names, kg.node_type.tolist())}
    assert types["Kismet"] == "movie"  # a head, although also the tail of has_tags
    assert types["Witness"] == "movie"
    assert types["Julien Duvivier"] == "person"  # directed_by outranks has_tags
    assert types["bd-r"] == "tag" and types["1943"] == "year" and types["English"] == "language"
    assert kg.node_type_names == ["movie", "person", "year", "language", "tag"]  # only used types
    assert kg.node_texts == kg.node_names
    assert kg.relation_names[0] == "directed_by"
    named, _ = load_metaqa_kb(root / "kb.txt", text_format="name_type")
    assert named.node_texts[1] == "William Dieterle (person)"


def test_questions_topics_answers_and_unknown_names(root):
    kg, qa = load_metaqa(root, hops=(1, 2))
    ids = {name: i for i, name in enumerate(kg.node_names)}
    q = qa.queries[1 * HOP_ID_BASE + 0]
    assert q.text == "what movies did William Dieterle direct"
    assert q.topic == [ids["William Dieterle"]] and q.answers == [ids["Kismet"]]
    assert q.hops == 1 and q.qtype == "director_to_movie"
    third = qa.queries[HOP_ID_BASE + 2]
    assert third.answers == [ids["1944"]]
    assert qa.unknown_names == ["Unheard Of"]
    two = qa.queries[2 * HOP_ID_BASE]
    assert two.hops == 2 and two.answers == [ids["English"]] and two.topic == [ids["Julien Duvivier"]]
    assert sorted(qa.splits["dev_1hop"]) == [HOP_ID_BASE, HOP_ID_BASE + 1, HOP_ID_BASE + 2]
    assert sorted(qa.splits["train"] + qa.splits["val"]) == sorted(qa.queries)


def test_split_is_fixed_disjoint_and_per_hop():
    ids = list(range(1000, 1100))
    train, val = split_ids(ids, hop=1)
    assert len(val) == 20 and not set(train) & set(val) and sorted(train + val) == ids
    assert split_ids(ids, hop=1) == (train, val)  # same seed, same split
    assert split_ids(ids, hop=2) != (train, val)  # each hop has its own stream


def test_qa_file_in_metaqa_format(root, tmp_path):
    kg, _ = load_metaqa_kb(root / "kb.txt")
    qa = load_metaqa_qa_file(root / "qa" / "2-hop" / "dev.txt", kg)
    assert qa.splits["dev"] == [2 * HOP_ID_BASE] and qa.splits["all"] == [2 * HOP_ID_BASE]
    # Without an N-hop folder, hops come from the qtype label.
    other = tmp_path / "mine"
    other.mkdir()
    (other / "test.txt").write_text(DEV_2 + "who wrote [Nobody Knows]\tEdward Knoblock\n")
    (other / "test_qtype.txt").write_text(QTYPE_2 + "movie_to_writer\n")
    qa = load_metaqa_qa_file(other / "test.txt", kg)
    assert [q.hops for q in qa.split("test")] == [2, 1]
    assert qa.unknown_names == ["Nobody Knows"] and qa.split("test")[1].topic == []


def test_malformed_lines_are_one_line_errors(root, tmp_path):
    bad = tmp_path / "bad_kb.txt"
    bad.write_text("a|directed_by|b\nno pipes here\n")
    with pytest.raises(MetaQAFormatError) as exc:
        load_metaqa_kb(bad)
    assert "bad_kb.txt, line 2: expected head|relation|tail" in str(exc.value) and "\n" not in str(exc.value)
    kg, _ = load_metaqa_kb(root / "kb.txt")
    (tmp_path / "q.txt").write_text("no tab in this line\n")
    with pytest.raises(MetaQAFormatError, match="q.txt, line 1: .*no tab"):
        load_metaqa_qa_file(tmp_path / "q.txt", kg)
    (tmp_path / "r.txt").write_text(DEV_2)
    (tmp_path / "r_qtype.txt").write_text("a\nb\n")
    with pytest.raises(MetaQAFormatError, match="must match line by line"):
        load_metaqa_qa_file(tmp_path / "r.txt", kg)
    with pytest.raises(MetaQAFormatError, match="--source DIR"):
        load_metaqa(tmp_path / "nowhere")


def test_a_byte_order_mark_is_not_part_of_a_name_and_binary_files_are_refused(root, tmp_path):
    from loaders.kg import DataError

    marked = tmp_path / "bom_kb.txt"
    marked.write_bytes("\ufeff".encode() + KB.encode())
    kg, _ = load_metaqa_kb(marked)
    assert kg.node_names[0] == "Kismet"
    (tmp_path / "bom_q.txt").write_bytes("\ufeff".encode() + DEV_1.encode())
    queries = load_metaqa_qa_file(tmp_path / "bom_q.txt", kg).queries
    assert queries[0].text.startswith("what movies")
    binary = tmp_path / "binary_kb.txt"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    latin = tmp_path / "latin_kb.txt"
    latin.write_bytes("Amélie|directed_by|Jean-Pierre Jeunet\n".encode("latin-1"))
    for path, says in ((binary, "is a binary file"), (latin, "line 1: not UTF-8")):
        with pytest.raises(DataError, match=says) as info:
            load_metaqa_kb(path)
        assert "\n" not in str(info.value)


@pytest.mark.skipif(not SHARED_METAQA.is_dir(), reason="../shared/data/metaqa is not on this machine")
def test_real_metaqa_counts():
    kg, qa = load_metaqa()  # default root is ../shared/data/metaqa
    assert kg.num_nodes == 43_234
    assert kg.num_edges == 133_582
    assert len(kg.relation_names) == 9
    assert [len(qa.splits[f"dev_{h}hop"]) for h in (1, 2, 3)] == [9_992, 14_872, 14_274]
    assert qa.unknown_names == []
    assert all(q.topic and q.answers and q.qtype for q in qa.queries.values())
    assert abs(len(qa.splits["val"]) / len(qa.queries) - 0.2) < 0.001
    # Deterministic: a second load gives identical ids and splits.
    kg2, qa2 = load_metaqa()
    assert kg2.node_names == kg.node_names and qa2.splits == qa.splits
    assert np.array_equal(kg2.edge_src, kg.edge_src)
