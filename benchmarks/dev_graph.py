"""A second development dataset: MLPQ's English path questions over DBpedia, as seeder-dgl files.

    python benchmarks/dev_graph.py --mirror PATH_TO_BARE_GIT_DIR --out DIR [--max-questions-per-split N]
        [--pairs en_fr] [--seed 13]

Source: MLPQ (Tan et al., "MLPQ: A Dataset for Path Question Answering over Multilingual Knowledge
Graphs", Big Data Research 2023), GitHub tan92hl/Dataset-for-QA-over-Multilingual-KG, GPL-3.0.
PATH_TO_BARE_GIT_DIR is a bare clone (or snapshot) of that repository; every file is read with
``git --git-dir=PATH show HEAD:<file>``. Standard library only, deterministic.

What is read: ``datasets/Questions 1.3/<pair>/<lang>_question/{train,dev,test}_<pair>_{2h,3h}_<lang>.txt``.
Each line is ``question@@@<path>``, the path a run of DBpedia URIs: ``e1 r1 e2 [e2'] r2 e3 ...``
where two adjacent entity URIs are the same entity in the two DBpedia editions (an inter-language
link; identical URIs when the path stays in one edition). The question's topic is the path's first
entity and its (single) answer the path's last entity; the hop count is the file's 2h/3h.

The graph: MLPQ's own sampled KGs (``datasets/KGs/...``) are over GitHub's snapshot size limit, so
they are absent from the snapshot this script is meant for. The graph written here is therefore the
union of every gold path triple of every MLPQ question file in the snapshot (all three language
pairs, questions in all three languages), restricted to the DBpedia editions of the chosen pairs
(default en_fr: English and French DBpedia), and fused along the inter-language links the paths
contain -- the "ILLs fusion" MLPQ itself uses for its merged bilingual KGs. A node is named by its
DBpedia resource title as the questions write it (underscores kept, e.g. ``Canton_of_Bertincourt``);
an English and a French resource with the same title are one node (the same title in two editions
is the same entity, as DBpedia's inter-language links have it); resources joined by an
inter-language link with different titles are one node, named by the title a selected question
uses as its topic if any, else the English title, else the first title in sorted order. Relations
are the DBpedia property names (English and French properties both occur: ``afterElection``,
``prédécesseur``). Every question's gold path is in the graph by construction; the graph holds no
other facts, so it is much sparser than a full KG (see the counts it prints).

Questions: the English questions of the chosen pairs (``en_question`` files). The text is written
exactly as the dataset has it (MLPQ marks no topic in the text). ``split`` maps dev to val; the
train 3-hop files are over the snapshot size limit too, so 3-hop questions are val/test only.
``answers`` is the gold answer's node name (``--all-answers``: and every other node the gold
relation path reaches from the topic in this graph, as MetaQA's answers are every entity its path
reaches), ``topic`` the topic's node name, ``hops`` 2 or 3.
Questions whose answer is not a node, or whose names cannot be written (a ``|`` in a name), are
dropped and counted. ``--max-questions-per-split N`` keeps a fixed seeded sample of N per split.

Writes DIR/triples.tsv (``head<TAB>relation<TAB>tail``, with that header row), DIR/questions.csv
(``question,answers,split,topic,hops``) and DIR/README.txt, and prints the counts.
"""
from __future__ import annotations

import argparse
import collections
import csv
import random
import re
import subprocess
import sys
from pathlib import Path

REPO = "tan92hl/Dataset-for-QA-over-Multilingual-KG"
QUESTION_DIR = "datasets/Questions 1.3/"
PAIRS = ("en_fr", "en_zh", "zh_fr")
HOSTS = {"dbpedia.org": "en", "fr.dbpedia.org": "fr", "zh.dbpedia.org": "zh"}
SPLITS = {"train": "train", "dev": "val", "test": "test"}
SPLIT_ORDER = ("train", "val", "test")
FILE_RE = re.compile(r"^datasets/Questions 1\.3/(?P<pair>[a-z]{2}_[a-z]{2})/(?P<qlang>[a-z]{2})_question/"
                     r"(?P<split>train|dev|test)_(?P=pair)_(?P<hops>[23])h_(?P=qlang)\.txt$")
URI_RE = re.compile(r"^<https?://(?P<host>[^/]+)/(?P<kind>resource|property)/(?P<local>.+)>$")


# ---------------------------------------------------------------------------------------- git

def git(mirror: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", f"--git-dir={mirror}", *args], capture_output=True, check=check)


def head_commit(mirror: str) -> str:
    return git(mirror, "rev-parse", "HEAD").stdout.decode().strip()


def list_files(mirror: str) -> list[str]:
    out = git(mirror, "ls-tree", "-r", "-z", "--name-only", "HEAD").stdout.decode("utf-8")
    return sorted(p for p in out.split("\0") if p)


def read_file(mirror: str, path: str) -> str | None:
    """The file's text at HEAD, or None when its blob is absent (over the snapshot's size limit)."""
    done = git(mirror, "show", f"HEAD:{path}", check=False)
    if done.returncode != 0:
        return None
    return done.stdout.decode("utf-8")


# ------------------------------------------------------------------------------------ parsing

class PathError(ValueError):
    pass


def parse_uri(token: str) -> tuple[str, str, str]:
    """``<http://fr.dbpedia.org/resource/X>`` -> ("fr", "resource", "X")."""
    m = URI_RE.match(token)
    if not m or m.group("host") not in HOSTS:
        raise PathError(f"unexpected token {token!r}")
    return HOSTS[m.group("host")], m.group("kind"), m.group("local")


def parse_path(text: str):
    """A gold path -> (triples, links, topic, answer, relation hops).

    triples: ((lang, head), relation, (lang, tail)); links: ((lang, a), (lang, b)) for adjacent
    entity tokens naming different resources (inter-language links); topic/answer: (lang, title).
    """
    tokens = [parse_uri(t) for t in text.split()]
    if len(tokens) < 3 or tokens[0][1] != "resource" or tokens[-1][1] != "resource":
        raise PathError("path does not start and end with an entity")
    triples, links, hops = [], [], 0
    i = 0
    while i < len(tokens) - 1:
        cur, nxt = tokens[i], tokens[i + 1]
        if cur[1] != "resource":
            raise PathError("two properties in a row")
        if nxt[1] == "resource":          # e e': same entity, possibly in the other edition
            if (cur[0], cur[2]) != (nxt[0], nxt[2]):
                links.append(((cur[0], cur[2]), (nxt[0], nxt[2])))
            i += 1
            continue
        if i + 2 >= len(tokens) or tokens[i + 2][1] != "resource":
            raise PathError("property without a tail entity")
        tail = tokens[i + 2]
        if not (cur[0] == nxt[0] == tail[0]):
            raise PathError("triple mixes DBpedia editions")
        triples.append(((cur[0], cur[2]), nxt[2], (tail[0], tail[2])))
        hops += 1
        i += 2
    return triples, links, (tokens[0][0], tokens[0][2]), (tokens[-1][0], tokens[-1][2]), hops


# ---------------------------------------------------------------------------------- union-find

class UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if rb < ra:
                ra, rb = rb, ra
            self.parent[rb] = ra


# ----------------------------------------------------------------------------------------- main

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", required=True, help=f"bare git dir of {REPO}")
    parser.add_argument("--out", required=True, help="output folder (created)")
    parser.add_argument("--max-questions-per-split", type=int, default=0,
                        help="keep a fixed seeded sample of at most N questions per split (0: all)")
    parser.add_argument("--pairs", default="en_fr",
                        help="comma-separated MLPQ language pairs whose English questions are used "
                             "(en_fr, en_zh, zh_fr); the graph keeps those pairs' DBpedia editions")
    parser.add_argument("--seed", type=int, default=13, help="seed of the per-split sample and of --resplit")
    parser.add_argument("--all-answers", action="store_true",
                        help="answers: every node the question's gold relation path reaches from its topic in the "
                             "graph (MLPQ names one; DBpedia relations often have several values), as MetaQA's are")
    parser.add_argument("--resplit", action="store_true",
                        help="pool MLPQ's train and dev questions and split them 80/20 per hop count again, so "
                             "training sees 3-hop questions too (test unchanged)")
    args = parser.parse_args()

    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    for p in pairs:
        if p not in PAIRS:
            raise SystemExit(f"unknown pair {p!r}; choose from {', '.join(PAIRS)}")
    kg_langs = {lang for p in pairs for lang in p.split("_")}
    mirror = args.mirror
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    commit = head_commit(mirror)
    files = [(p, FILE_RE.match(p)) for p in list_files(mirror)]
    files = [(p, m) for p, m in files if m]
    if not files:
        raise SystemExit(f"no MLPQ question files under {QUESTION_DIR!r} in {mirror}")

    # -- read every question file: all gold paths feed the graph, English ones of the pairs are kept
    triples_raw: set[tuple] = set()
    links_raw: set[tuple] = set()
    questions = []                      # (split, hops, file order, line order, question, topic, answer)
    missing, malformed, read_files = [], 0, []
    hop_mismatch = 0
    for order, (path, m) in enumerate(files):
        text = read_file(mirror, path)
        if text is None:
            missing.append(path)
            continue
        read_files.append(path)
        keep = m.group("qlang") == "en" and m.group("pair") in pairs
        for lineno, line in enumerate(text.splitlines()):
            line = line.strip()
            if not line:
                continue
            if "@@@" not in line:
                malformed += 1
                continue
            question, path_text = line.split("@@@", 1)
            try:
                triples, links, topic, answer, hops = parse_path(path_text)
            except PathError:
                malformed += 1
                continue
            triples_raw.update(triples)
            links_raw.update(links)
            if keep:
                if hops != int(m.group("hops")):
                    hop_mismatch += 1
                questions.append((SPLITS[m.group("split")], int(m.group("hops")), order, lineno,
                                  question.strip(), topic, answer, [r for _, r, _ in triples]))

    # -- the graph: chosen editions, nodes keyed by title, fused along inter-language links
    triples_kg = [t for t in triples_raw if t[0][0] in kg_langs]
    uf = UnionFind()
    titles_by_lang: dict[str, set[str]] = collections.defaultdict(set)
    for (hl, h), _, (tl, t) in triples_kg:
        uf.find(h)
        uf.find(t)
        titles_by_lang[h].add(hl)
        titles_by_lang[t].add(tl)
    fused_links = 0
    for (la, a), (lb, b) in sorted(links_raw):
        if la in kg_langs and lb in kg_langs and a in uf.parent and b in uf.parent and a != b:
            if uf.find(a) != uf.find(b):
                fused_links += 1
            uf.union(a, b)
    same_title = sum(1 for langs in titles_by_lang.values() if len(langs) > 1)

    topic_titles = {q[5][1] for q in questions}
    members: dict[str, list[str]] = collections.defaultdict(list)
    for title in uf.parent:
        members[uf.find(title)].append(title)
    name_of: dict[str, str] = {}
    for root, group in members.items():
        group.sort()
        if len(group) == 1:
            chosen = group[0]
        else:
            def rank(title: str) -> tuple:
                return (title not in topic_titles, "en" not in titles_by_lang.get(title, ()), title)
            chosen = min(group, key=rank)
        for title in group:
            name_of[title] = chosen
    renamed_topics = sum(1 for t in topic_titles if t in name_of and name_of[t] != t)

    triples = sorted({(name_of[h], r, name_of[t]) for (_, h), r, (_, t) in triples_kg})
    nodes = {x for h, _, t in triples for x in (h, t)}
    relations = {r for _, r, _ in triples}
    self_loops = sum(1 for h, _, t in triples if h == t)
    bad_chars = {n for n in nodes if any(c in n for c in "\t\n\r|")}
    rel_bad = {r for r in relations if any(c in r for c in "\t\n\r")}
    if rel_bad:
        raise SystemExit(f"relation names with tabs/newlines: {sorted(rel_bad)[:5]}")

    # -- questions
    rows, dropped = [], collections.Counter()
    following: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    for h, r, t in triples:
        following[(h, r)].add(t)

    def path_answers(topic_name: str, relations: list[str]) -> set[str]:
        """Every node the question's gold relation path reaches from its topic, in this graph."""
        frontier = {topic_name}
        for relation in relations:
            frontier = {t for node in frontier for t in following.get((node, relation), ())}
        return frontier

    multi = 0
    for split, hops, order, lineno, question, topic, answer, path in sorted(
            questions, key=lambda q: (SPLIT_ORDER.index(q[0]), q[1], q[2], q[3])):
        answer_name = name_of.get(answer[1])
        topic_name = name_of.get(topic[1], "")
        if answer_name is None or answer_name not in nodes:
            dropped["answer not in graph"] += 1
            continue
        if answer_name in bad_chars or topic_name in bad_chars:
            dropped["name with | or tab"] += 1
            continue
        answers = [answer_name]
        if args.all_answers and topic_name in nodes:
            others = sorted(path_answers(topic_name, path) - {answer_name} - bad_chars)
            multi += bool(others)
            answers += others
        rows.append({"question": question, "answers": "|".join(answers), "split": split,
                     "topic": topic_name if topic_name in nodes else "", "hops": hops})
    total_kept = len(rows)
    if args.resplit:
        # MLPQ's 3-hop training files are missing from the snapshot, so its train split is 2-hop only
        # and a policy never sees a 3-hop question; pool train and dev and split them again, per hop
        # count, 80/20 (the test split stays as MLPQ has it).
        rng = random.Random(f"resplit:{args.seed}")
        for hops in sorted({r["hops"] for r in rows}):
            pool = [r for r in rows if r["hops"] == hops and r["split"] in ("train", "val")]
            rng.shuffle(pool)
            for i, r in enumerate(pool):
                r["split"] = "val" if i < round(0.2 * len(pool)) else "train"
    if args.max_questions_per_split > 0:
        rng = random.Random(args.seed)
        sampled = []
        for split in SPLIT_ORDER:
            idx = [i for i, r in enumerate(rows) if r["split"] == split]
            if len(idx) > args.max_questions_per_split:
                idx = sorted(rng.sample(idx, args.max_questions_per_split))
            sampled.extend(rows[i] for i in idx)
        rows = sampled

    # -- write
    with open(out / "triples.tsv", "w", encoding="utf-8", newline="") as f:
        f.write("head\trelation\ttail\n")
        for h, r, t in triples:
            f.write(f"{h}\t{r}\t{t}\n")
    with open(out / "questions.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["question", "answers", "split", "topic", "hops"])
        writer.writeheader()
        writer.writerows(rows)

    # -- counts
    per_split = collections.Counter(r["split"] for r in rows)
    per_hop = collections.Counter(r["hops"] for r in rows)
    per_split_hop = collections.Counter((r["split"], r["hops"]) for r in rows)
    verbatim = sum(1 for r in rows if r["topic"] and r["topic"] in r["question"])
    degree = collections.Counter()
    for h, _, t in triples:
        degree[h] += 1
        degree[t] += 1
    lines = [
        f"source: github.com/{REPO} @ {commit} (GPL-3.0, LICENSE.txt)",
        f"pairs: {','.join(pairs)}; graph editions: {','.join(sorted(kg_langs))}",
        f"question files read: {len(read_files)}; absent from the snapshot (over its size limit): {len(missing)}",
        f"gold paths unreadable (malformed lines): {malformed}; hop count differing from file name: {hop_mismatch}",
        f"nodes: {len(nodes)}  triples: {len(triples)}  relations: {len(relations)}  self-loops: {self_loops}",
        f"node degree: mean {2 * len(triples) / max(1, len(nodes)):.2f}, max {max(degree.values(), default=0)}, "
        f"nodes of degree 1: {sum(1 for d in degree.values() if d == 1)}",
        f"fusion: titles in both editions merged: {same_title}; inter-language links merging different titles: "
        f"{fused_links}; topic titles renamed by fusion: {renamed_topics}",
        f"questions: {len(rows)} written (of {total_kept} kept; {len(questions)} English questions read)",
        "  per split: " + ", ".join(f"{s} {per_split.get(s, 0)}" for s in SPLIT_ORDER),
        "  per hops: " + ", ".join(f"{h}-hop {per_hop[h]}" for h in sorted(per_hop)),
        "  per split and hops: " + ", ".join(f"{s}/{h} {per_split_hop[(s, h)]}"
                                              for s in SPLIT_ORDER for h in (2, 3)),
        f"dropped questions: {sum(dropped.values())}" + (f" ({dict(dropped)})" if dropped else ""),
        f"questions with more than MLPQ's one answer (--all-answers): {multi}",
        f"topic name verbatim in question text: {verbatim}/{len(rows)}",
        f"node names containing '|' or a tab (questions using them are dropped): {len(bad_chars)}",
    ]
    print("\n".join(lines))

    sample_note = ("Train and val: MLPQ's train and dev questions pooled and split 80/20 per hop count "
                   f"(--resplit, seed {args.seed}). " if args.resplit else "") + (f"Sample: a fixed seeded sample of at most {args.max_questions_per_split} questions "
                   f"per split (seed {args.seed})." if args.max_questions_per_split > 0
                   else "All questions kept (no sampling).")
    readme = f"""MLPQ (English path questions) as a seeder-dgl development graph
Generated by benchmarks/dev_graph.py (deterministic; standard library only).

Source repository: https://github.com/{REPO}
Commit: {commit}
Paper: Yiming Tan, Yongrui Chen, Guilin Qi, Weizhuo Li, Meng Wang. MLPQ: A Dataset for Path
Question Answering over Multilingual Knowledge Graphs. Big Data Research, 2023.
License: GPL-3.0 (LICENSE.txt in the source repository); this derived data stays under it.

Files read: {QUESTION_DIR}<pair>/<lang>_question/<split>_<pair>_<2h|3h>_<lang>.txt
Absent from the snapshot (over GitHub's snapshot size limit): MLPQ's KG files under datasets/KGs/
and the train 3-hop question files:
{chr(10).join('  ' + p for p in missing) if missing else '  (none)'}

Graph (triples.tsv): the union of all gold path triples of every MLPQ question file read
(all pairs, all question languages), restricted to the DBpedia editions of the chosen pairs
({','.join(sorted(kg_langs))}), fused along the inter-language links in the paths (MLPQ's own
"ILLs fusion"). Node names are DBpedia resource titles as the questions write them (underscores
kept); the same title in English and French DBpedia is one node. It is NOT MLPQ's full sampled KG
(absent from the snapshot): it holds only facts some question's gold path uses, so it is far
sparser than a real KG.

Questions (questions.csv): the English questions of the pairs {','.join(pairs)}, text exactly as
the dataset writes it; answers = the path's last entity (MLPQ gives one answer per question;
with --all-answers, every node the gold relation path reaches from the topic in this graph);
topic = the path's first entity; hops = 2 or 3; split = train/val/test (MLPQ v1.3's own split,
dev -> val). The train 3-hop files are absent, so 3-hop questions are in val/test only.
{sample_note}

Counts:
{chr(10).join(lines)}
"""
    (out / "README.txt").write_text(readme, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
