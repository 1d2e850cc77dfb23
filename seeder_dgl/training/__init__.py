"""Training: configuration, losses (REINFORCE, BPR) and the expansion rollout."""
from seeder_dgl.training.config import ABLATIONS, DATASET_DEFAULTS, TrainConfig
from seeder_dgl.training.losses import advantage, bpr_loss, group_advantage, recall_at_any, reinforce_loss
from seeder_dgl.training.rollout import (Objective, RolloutOutput, StepTrace, gumbel_top_k, infer,
                                         plackett_luce_log_prob, rollout, training_objective)

__all__ = [
    "ABLATIONS", "DATASET_DEFAULTS", "TrainConfig", "advantage", "bpr_loss", "group_advantage", "recall_at_any",
    "reinforce_loss", "Objective", "RolloutOutput", "StepTrace", "gumbel_top_k", "infer", "plackett_luce_log_prob",
    "rollout", "training_objective",
]
