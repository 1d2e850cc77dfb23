"""benchmarks/fused_checkpoints.py: reciprocal rank fusion of several policies' rankings."""
from benchmarks.fused_checkpoints import fuse, hit


def test_fusion_puts_first_what_the_rankings_agree_on():
    # 7 and 2 are first for one ranking each; 3 second and 1 third for both: Σ 1/(c + rank) ranks
    # 3 and 1 first for c = 5, and 7 and 2 (in the order met) for c = 0.1, where a first place
    # outweighs two second places.
    a, b = [7, 3, 1], [2, 3, 1]
    assert fuse([a, b], 5) == [3, 1, 7, 2]
    assert fuse([a, b], 0.1)[:2] == [7, 2]
    assert fuse([a], 60) == a  # one ranking is left as it is


def test_hit_counts_an_answer_within_the_first_k():
    ranked = [[1, 2, 3], [4, 5, 6], [7]]
    answers = [{2}, {9}, set()]
    assert hit(ranked, answers, 1) == 0.0
    assert hit(ranked, answers, 2) == 1 / 3
