"""The funnel of `eval --diagnose`: each stage flag on crafted subgraphs, and stage monotonicity."""
from __future__ import annotations

import numpy as np
import torch

from seeder_dgl.evaluation.diagnose import STAGES, diagnose, render_markdown
from seeder_dgl.model import SeederPolicy
from seeder_dgl.subgraph.record import QuerySubgraph
from seeder_dgl.inference import LoadedPolicy
from seeder_dgl.training.checkpoint import Preprocessing
from seeder_dgl.training.config import TrainConfig

DIM, RELATIONS = 8, 3


def record(qid: int, node_ids, edges, hop, score, answers, num_answers=None) -> QuerySubgraph:
    node_ids = np.asarray(node_ids, np.int64)
    src = np.asarray([a for a, b in edges] + [b for a, b in edges], np.int64)
    dst = np.asarray([b for a, b in edges] + [a for a, b in edges], np.int64)
    labels = np.isin(node_ids, answers)
    return QuerySubgraph(query_id=qid, node_ids=node_ids, hop=np.asarray(hop, np.int8),
                         score=np.asarray(score, np.float32), src=src, dst=dst, rel=np.zeros(src.size, np.int64),
                         labels=labels, num_answers=len(answers) if num_answers is None else num_answers)


def loaded_policy(expansion_sizes=(1,), frontier_caps=(1,), seed=0) -> LoadedPolicy:
    torch.manual_seed(seed)
    cfg = TrainConfig(hidden_dim=8, heads=2, num_layers=1, expansion_sizes=expansion_sizes,
                      frontier_caps=frontier_caps, pca_dim=None)
    policy = SeederPolicy(DIM, RELATIONS + 1, hidden_dim=8, num_layers=1, heads=2, expansion_sizes=expansion_sizes,
                          frontier_caps=frontier_caps).eval()
    return LoadedPolicy(policy=policy, cfg=cfg, preprocessing=Preprocessing(RELATIONS), relation_types=["a", "b", "c"],
                        dataset="t", embedding_model=None, dimension=DIM, device=torch.device("cpu"))


def test_each_stage_is_where_the_answer_was_lost():
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(100, DIM)).astype(np.float32)
    records = [
        # the seed is the answer: found at every stage, and ranked first (the only node)
        record(0, [10], [], [0], [0.9], answers=[10]),
        # no answer in the subgraph at all
        record(1, [20, 21], [(0, 1)], [0, 1], [0.9, 0.5], answers=[99]),
        # the answer is two hops from the seed, the horizon is one step
        record(2, [30, 31, 32], [(0, 1), (1, 2)], [0, 1, 2], [0.9, 0.5, 0.4], answers=[32]),
        # the answer is a neighbour, but the cap of 1 keeps the neighbour of higher K-hop score
        record(3, [40, 41, 42], [(0, 1), (0, 2)], [0, 1, 1], [0.9, 0.6, 0.2], answers=[42]),
        # the answer is the only neighbour: shown to the policy and picked (c_1 = 1)
        record(4, [50, 51], [(0, 1)], [0, 1], [0.9, 0.3], answers=[51]),
    ]
    seeded = np.asarray([True, True, False, False, False])  # question 1: reachable, but K-hop left it out
    funnel = diagnose(loaded_policy(), records, emb, rng.normal(size=(5, DIM)).astype(np.float32), seeded=seeded)
    f = {s: funnel.flags[s].tolist() for s in STAGES}
    assert f["seeded"] == [True, True, True, True, True]  # an answer in the subgraph was within reach
    assert f["in_subgraph"] == [True, False, True, True, True]
    assert f["reachable"] == [True, False, False, True, True]
    assert f["candidate"] == [True, False, False, False, True]
    assert f["picked"] == [True, False, False, False, True]
    assert f["hit@1"][0] and f["hit@5"][4]
    assert funnel.selected_size.tolist() == [1, 2, 2, 2, 2]
    assert funnel.query_ids == [0, 1, 2, 3, 4]
    without = diagnose(loaded_policy(), records, emb, rng.normal(size=(5, DIM)).astype(np.float32))
    assert without.flags["seeded"].tolist() == without.flags["in_subgraph"].tolist()


def test_seeded_means_an_answer_within_the_hops_of_a_seed():
    from seeder_dgl.evaluation.diagnose import seeded_flags
    from seeder_dgl.retrieval.memory import GraphArrays

    # a path 0 - 1 - 2 - 3 - 4, and 5 on its own
    arrays = GraphArrays.from_arrays(6, [0, 1, 2, 3], [1, 2, 3, 4], [0, 0, 1, 1])
    found = seeded_flags(arrays, [[0], [0], [4, 5], [5], []], [[2], [3], [2], [0], [0]], hops=2)
    assert found.tolist() == [True, False, True, False, False]


def test_stages_imply_each_other_and_group():
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(500, DIM)).astype(np.float32)
    records = []
    for q in range(30):
        n = int(rng.integers(5, 40))
        edges = [(i, int(rng.integers(0, i))) for i in range(1, n)]
        ids = rng.choice(500, n, replace=False)
        records.append(record(q, ids, edges, np.minimum(np.arange(n), 3), rng.random(n),
                              answers=rng.choice(ids, 2, replace=False) if q % 3 else [999]))
    funnel = diagnose(loaded_policy(expansion_sizes=(2, 3), frontier_caps=(4, 6)), records, emb,
                      rng.normal(size=(30, DIM)).astype(np.float32), batch_size=7)
    for before, after in zip(STAGES[:-1], STAGES[1:]):
        assert not np.any(funnel.flags[after] & ~funnel.flags[before]), (before, after)
    assert not funnel.flags["in_subgraph"][::3].any()
    funnel.group("hops", [q % 2 + 1 for q in range(30)])
    assert set(funnel.groups["hops"]) == {"1", "2"}
    assert funnel.groups["hops"]["1"]["questions"] == 15
    text = render_markdown(funnel)
    assert "### by hops" in text and "| all | 30 |" in text
    losses = funnel.losses()
    assert abs(sum(losses.values()) - (funnel.summary()["in_subgraph"] - funnel.summary()["hit@1"])) < 1e-9


def test_the_funnel_ranks_as_the_policy_serves_with_the_answer_types_multiplied_in():
    torch.manual_seed(0)
    cfg = TrainConfig(hidden_dim=8, heads=2, num_layers=1, expansion_sizes=(1,), frontier_caps=(1,), pca_dim=None)
    policy = SeederPolicy(DIM, RELATIONS + 1, hidden_dim=8, num_layers=1, heads=2, expansion_sizes=(1,),
                          frontier_caps=(1,), num_node_types=3).eval()
    loaded = LoadedPolicy(policy=policy, cfg=cfg, preprocessing=Preprocessing(RELATIONS, node_type_names=["movie", "person"]),
                          relation_types=["a", "b", "c"], dataset="t", embedding_model=None, dimension=DIM,
                          device=torch.device("cpu"))
    rng = np.random.default_rng(1)
    emb = rng.normal(size=(100, DIM)).astype(np.float32)
    types = np.zeros(100, np.int64)
    types[51] = 1  # the answer is a person, the seed a film
    query = rng.normal(size=(1, DIM)).astype(np.float32)
    for asked, answer_first in (("person", True), ("movie", False)):
        sub = record(4, [50, 51], [(0, 1)], [0, 1], [0.9, 0.3], answers=[51])
        sub.answer_type_names = ("movie", "person")
        sub.answer_types = np.asarray([1e-6, 1.0] if asked == "person" else [1.0, 1e-6], np.float32)
        funnel = diagnose(loaded, [sub], emb, query, node_types=types)
        served = loaded.rank([sub], emb, query, k=5, node_types=types)[0]
        assert funnel.flags["picked"][0] and funnel.flags["hit@5"][0]
        assert bool(funnel.flags["hit@1"][0]) is answer_first is (served[0][0] == 51)
