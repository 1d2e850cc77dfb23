"""benchmarks/label_agreement.py: questions grouped by what the training labels say of their wording."""
import json

from benchmarks.label_agreement import main, wording

TRIPLES = """head\trelation\ttail
Alice\tschool\tUniA
UniA\tcity\tParis
UniA\tcountry\tFrance
Bob\tschool\tUniB
UniB\tcity\tLyon
UniB\tcountry\tFrance
Carl\tschool\tUniC
UniC\tcity\tNice
UniC\tcountry\tFrance
Dora\tboss\tEve
Eve\tcity\tRome
"""
QUESTIONS = """question,answers,split,topic,hops
where is the school of Alice located?,Paris,train,Alice,2
where is the school of Bob located?,France,train,Bob,2
which city is the school of Alice in?,Paris,train,Alice,2
where is the school of Carl located?,Nice,val,Carl,2
which city is the school of Carl in?,Nice,val,Carl,2
what city does the boss of Dora live in?,Rome,val,Dora,2
where is the school of C.a.r.l located?,Nice,val,Carl,2
"""


def test_wording_masks_the_topic_whatever_its_case_and_underscores():
    assert wording("Where is X_Y located?", "X_Y") == wording("where is x y located", "X_Y")
    assert wording("where is X_Y located?", "X_Y") != wording("where is X_Y from?", "X_Y")


def test_groups_follow_the_training_labels(tmp_path):
    (tmp_path / "triples.tsv").write_text(TRIPLES, encoding="utf-8")
    (tmp_path / "questions.csv").write_text(QUESTIONS, encoding="utf-8")
    # Per-query results in the shape `eval --per-query` writes: ids are the file's rows.
    results = {"queries": {"id": [3, 4, 5, 6], "hops": [2, 2, 2, 2]},
               "per_query": {"seeder": {"metrics": {"hit@1": [0.0, 1.0, 1.0, 0.0], "hit@5": [1.0, 1.0, 1.0, 0.0]}}}}
    (tmp_path / "results.json").write_text(json.dumps(results), encoding="utf-8")
    rows = main(["--source", str(tmp_path), "--results", str(tmp_path / "results.json"), "--out", str(tmp_path / "out")])
    got = {(r["hops"], r["group"]): (r["questions"], r["hit1"], r["hit5"]) for r in rows}
    assert got[("2", "seen, paths disagree")] == (1, 0.0, 1.0)  # Alice's city, Bob's country: one template
    assert got[("2", "seen, one path")] == (1, 1.0, 1.0)
    assert got[("2", "new wording")] == (1, 1.0, 1.0)
    assert got[("2", "topic garbled")] == (1, 0.0, 0.0)
    assert got[("all", "all")] == (4, 0.5, 0.75)
    assert list((tmp_path / "out").glob("label-agreement-*.md"))


def test_the_wordings_best_reader_takes_the_majority_path_that_exists_from_the_topic(tmp_path):
    """Two training labels say country, one says city: the reader answers the country where the
    topic has one (a miss for Carl, whose label took the city) and the city where it has only that."""
    triples = TRIPLES + "Dan\tschool\tUniD\nUniD\tcountry\tSpain\nFred\tschool\tUniF\nUniF\tcity\tOslo\n"
    questions = "\n".join(QUESTIONS.strip().splitlines()[:4] + [
        "where is the school of Dan located?,Spain,train,Dan,2",
        "where is the school of Carl located?,Nice,val,Carl,2",
        "where is the school of Fred located?,Oslo,val,Fred,2",
        "which city is the school of Carl in?,Nice,val,Carl,2",
    ]) + "\n"
    (tmp_path / "triples.tsv").write_text(triples, encoding="utf-8")
    (tmp_path / "questions.csv").write_text(questions, encoding="utf-8")
    results = {"queries": {"id": [4, 5, 6], "hops": [2, 2, 2]},
               "per_query": {"seeder": {"metrics": {"hit@1": [1.0, 1.0, 1.0], "hit@5": [1.0, 1.0, 1.0]}}}}
    (tmp_path / "results.json").write_text(json.dumps(results), encoding="utf-8")
    rows = main(["--source", str(tmp_path), "--results", str(tmp_path / "results.json"), "--out", str(tmp_path / "out")])
    got = {(r["hops"], r["group"]): (r["questions"], r["reader_ceiling"]) for r in rows}
    assert got[("2", "seen, paths disagree")] == (2, 0.5)  # Carl: country (miss); Fred: only the city exists (hit)
    assert got[("2", "seen, one path")] == (1, 1.0)
