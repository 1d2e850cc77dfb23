"""FlatAdamW: torch.optim.AdamW's arithmetic over one flat vector, and AdamW's checkpoint layout."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from seeder_dgl.training.optimizer import FlatAdamW


def small_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.LayerNorm(7), nn.Linear(7, 3), nn.Embedding(4, 3))


def loss_of(model: nn.Module, step: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(100 + step)
    x = torch.randn(9, 5, generator=gen)
    out = model[3](model[2](model[1](model[0](x))))
    return (out * 3).pow(2).mean() + model[4](torch.tensor([step % 4])).sum()


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, steps: range, clip: float = 0.5) -> None:
    for step in steps:
        optimizer.zero_grad(set_to_none=True)
        loss_of(model, step).backward()
        if isinstance(optimizer, FlatAdamW):
            optimizer.gather_gradients()
            torch.nn.utils.clip_grad_norm_([optimizer.flat], clip)
        else:
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), clip, foreach=True)
        optimizer.step()


def trained_pair(lr: float, weight_decay: float, steps: int):
    """The same model trained ``steps`` steps by torch's AdamW and by FlatAdamW."""
    reference, flat = small_model(), small_model()
    plain_opt = torch.optim.AdamW(reference.parameters(), lr=lr, weight_decay=weight_decay, foreach=True)
    flat_opt = FlatAdamW(flat.parameters(), lr=lr, weight_decay=weight_decay)
    train_steps(reference, plain_opt, range(steps))
    train_steps(flat, flat_opt, range(steps))
    return reference, plain_opt, flat, flat_opt


def assert_same_parameters(a: nn.Module, b: nn.Module) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


def test_flat_adamw_follows_adamw_with_clipping_and_weight_decay():
    reference, _, flat, flat_opt = trained_pair(lr=3e-2, weight_decay=0.1, steps=40)
    assert_same_parameters(reference, flat)
    # The parameters moved (a no-op optimiser would pass the comparison above only by accident).
    assert not torch.allclose(flat[0].weight, small_model()[0].weight)
    # Every parameter is a view of the flat vector: what the optimiser steps is what the model reads.
    offset = 0
    for p in flat.parameters():
        assert torch.equal(p.detach().reshape(-1), flat_opt.flat.detach()[offset:offset + p.numel()])
        offset += p.numel()


def test_checkpoints_use_adamw_per_parameter_layout_both_ways():
    reference, plain_opt, flat, flat_opt = trained_pair(lr=1e-2, weight_decay=0.01, steps=10)
    saved = flat_opt.state_dict()
    assert sorted(saved["state"]) == list(range(len(list(flat.parameters()))))
    for i, p in enumerate(flat.parameters()):
        assert saved["state"][i]["exp_avg"].shape == p.shape
    # A plain AdamW resumes from FlatAdamW's state, and a FlatAdamW from a plain AdamW's.
    resumed_plain_model = copy.deepcopy(flat)
    resumed_plain = torch.optim.AdamW(resumed_plain_model.parameters(), lr=1e-2, weight_decay=0.01, foreach=True)
    resumed_plain.load_state_dict(saved)
    resumed_flat_model = copy.deepcopy(reference)
    resumed_flat = FlatAdamW(resumed_flat_model.parameters(), lr=1e-2, weight_decay=0.01)
    resumed_flat.load_state_dict(plain_opt.state_dict())
    for model, opt in ((reference, plain_opt), (resumed_plain_model, resumed_plain), (resumed_flat_model, resumed_flat)):
        train_steps(model, opt, range(10, 20))
    assert_same_parameters(reference, resumed_plain_model)
    assert_same_parameters(reference, resumed_flat_model)
    with pytest.raises(ValueError, match="parameters"):
        FlatAdamW(small_model().parameters()).load_state_dict(
            torch.optim.AdamW(nn.Linear(2, 2).parameters()).state_dict())


def test_a_parameter_without_gradient_is_left_alone():
    model = small_model()
    opt = FlatAdamW(model.parameters(), lr=5e-2, weight_decay=0.5)
    train_steps(model, opt, range(3))
    frozen = model[3].bias
    before = frozen.detach().clone()
    moments = {k: opt.state_dict()["state"][5][k].clone() for k in ("exp_avg", "exp_avg_sq")}
    opt.zero_grad()
    loss_of(model, 3).backward()
    frozen.grad = None  # as if this step's loss had not used it
    opt.step()
    torch.testing.assert_close(frozen.detach(), before, rtol=0, atol=0)
    after = opt.state_dict()["state"][5]
    for k, v in moments.items():
        torch.testing.assert_close(after[k], v, rtol=0, atol=0)
    assert not torch.equal(model[0].weight.detach(), small_model()[0].weight.detach())
    # No gradient anywhere: nothing moves at all.
    snapshot = opt.flat.detach().clone()
    opt.zero_grad()
    opt.step()
    assert torch.equal(opt.flat.detach(), snapshot)
