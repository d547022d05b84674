"""A checkpoint restores every state machine bitwise (checkpoint layer of FALSIFY-TRAIN-LOOP-012)
and holds the trained model, with a manifest that matches its bytes (FALSIFY-ARCH-370M-010,
on the tiny model; the 370M run is in test_checkpoint_370m.py).
"""

from __future__ import annotations

import random

import numpy as np
import torch
from safetensors import safe_open

from tests.unit.trainer.checkpoint_support import TINY, fresh, save, state_at, trained
from trainer.checkpoint.load import load_checkpoint
from trainer.checkpoint.verify import inspect_checkpoint
from trainer.model import llama
from trainer.model.params import parameter_shapes


def _draws() -> tuple[list[float], list[float], list[float]]:
    return (
        torch.rand(5).tolist(),
        [random.random() for _ in range(5)],
        np.random.random(5).tolist(),
    )


def test_weights_adamw_moments_step_counts_state_and_rng_come_back_bitwise(tmp_path):
    model, optimizer = trained(steps=3)
    torch.manual_seed(11)
    random.seed(12)
    np.random.seed(13)
    path = save(tmp_path, 3, model, optimizer, val_loss=4.5, best_val_loss=4.25)
    expected_draws = _draws()  # what the uninterrupted run draws next

    torch.manual_seed(99)  # a new process would start from other states
    random.seed(99)
    np.random.seed(99)
    model2, optimizer2 = fresh(seed=7)
    state = load_checkpoint(path, model2, optimizer2)

    assert _draws() == expected_draws, "RNG states were not restored"
    assert state == state_at(
        3, val_loss=4.5, best_val_loss=4.25, optimizer_groups=state.optimizer_groups
    ), "state.json (scheduler step, data position, early stop, hashes) changed in the round trip"
    assert (state.scheduler_step, state.epoch, state.epoch_step) == (3, 1, 2)
    names = dict(model.named_parameters())
    for name, p2 in model2.named_parameters():
        p = names[name]
        assert torch.equal(p, p2), f"weight {name} differs"
        s, s2 = optimizer.state[p], optimizer2.state[p2]
        assert set(s2) == {"step", "exp_avg", "exp_avg_sq"}, name
        assert float(s2["step"]) == 3.0, f"{name}: AdamW step count {float(s2['step'])}, not 3"
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert s[key].dtype == s2[key].dtype, f"{name}.{key} dtype"
            assert torch.equal(s[key], s2[key]), f"{name}.{key} differs after restore"
        assert bool(s2["exp_avg"].abs().sum() > 0), f"{name}: exp_avg restored as zeros"
    for g, g2 in zip(optimizer.param_groups, optimizer2.param_groups, strict=True):
        assert {k: v for k, v in g.items() if k != "params"} == {
            k: v for k, v in g2.items() if k != "params"
        }

    # The next step of the restored pair is the next step of the original pair.
    from tests.unit.trainer.checkpoint_support import train_steps  # noqa: PLC0415

    train_steps(model, optimizer, 1, seed=5)
    train_steps(model2, optimizer2, 1, seed=5)
    for (name, p), (_, p2) in zip(model.named_parameters(), model2.named_parameters(), strict=True):
        assert torch.equal(p, p2), f"{name} diverged one step after the restore"


def test_the_checkpoint_holds_the_trained_model_and_a_manifest_of_its_bytes(tmp_path):
    model, optimizer = trained(steps=2)
    path = save(tmp_path, 2, model, optimizer)
    report = inspect_checkpoint(path)
    assert report.valid, report.problems
    expected = parameter_shapes(TINY)
    assert report.manifest["tensor_count"] == len(expected) == 21
    assert report.manifest["parameter_count"] == 158_016
    assert report.manifest["step"] == 2
    assert all(v.ok for v in report.files) and len(report.files) == 5
    init = llama.build_model(TINY, seed=0).state_dict()
    live = model.state_dict()
    with safe_open(str(path / "model.safetensors"), framework="pt") as fh:
        names = set(fh.keys())
        assert names == set(expected), (
            f"saved {len(names)} tensors: missing {set(expected) - names}"
        )
        for name in sorted(names):
            saved = fh.get_tensor(name)
            assert saved.dtype == torch.float32 and tuple(saved.shape) == expected[name]
            assert torch.isfinite(saved).all(), name
            assert torch.equal(saved, live[name]), f"{name} is not the trained value"
        assert not torch.equal(fh.get_tensor("lm_head.weight"), init["lm_head.weight"]), (
            "lm_head.weight is the initial value: the checkpoint holds init weights"
        )
        assert not torch.equal(
            fh.get_tensor("lm_head.weight"), fh.get_tensor("model.embed_tokens.weight")
        )
