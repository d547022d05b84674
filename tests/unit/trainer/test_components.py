"""The loop's registry of resumable parts (trainer/train/components.py) and its hooks
(trainer/train/hooks.py): state.json is the sum of the parts' keys, a resume loads them
in registry order with the identity first, and a hooks object may have only some methods.

    .venv/bin/pytest -q tests/unit/trainer/test_components.py
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.trainer.loop_support import tiny_config
from trainer.checkpoint.layout import CheckpointError
from trainer.checkpoint.state import TrainingState
from trainer.model.llama import build_model
from trainer.train import components, guards, optim
from trainer.train.hooks import Hooks, as_hooks
from trainer.train.steps import iterate_steps


def train_state(world_size: int = 1, config_hash: str = "c" * 64) -> components.TrainState:
    """A fresh registry of every part over the tiny model (also test_checkpoint_io's)."""
    model = build_model(tiny_config(), seed=0)
    return components.TrainState(
        identity=components.RunIdentity(
            config_hash, "d" * 64, seed=7, tokenizer_dir="tok", world_size=world_size
        ),
        data=components.DataPosition(),
        schedule=components.SchedulePosition(),
        guards=components.Guards(guards.DivergenceGuard(64), guards.EarlyStopping()),
        metrics=components.ValidationHistory(),
        model=model,
        optimizer=optim.build_adamw(model, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1),
        rng=components.RngState(),
    )


def _after_steps(state: components.TrainState, steps: int) -> None:
    """The parts as a run leaves them after ``steps`` steps of 4 per epoch, one evaluation."""
    plans = list(iterate_steps(16, micro_batch=2, grad_accum=2, epochs=3, last_step=steps))
    state.data.completed(plans[-1])
    state.schedule.step = steps
    state.guards.check(3.5)
    state.metrics.add(steps, 3.5)


def test_state_json_is_every_part_s_keys_and_loads_back_into_a_fresh_registry():
    saved = train_state()
    _after_steps(saved, 6)
    written = components.state_json(saved)
    tensor_file_keys = {"optimizer_groups"}  # the optimizer's, filled in by the writer
    keys = {f.name for f in dataclasses.fields(TrainingState)} - tensor_file_keys
    parts = [p for k, p in saved.parts().items() if k not in components.TENSOR_PARTS]
    assert sorted(k for p in parts for k in p.state_dict()) == sorted(keys), "each key once"
    assert (written.step, written.epoch, written.epoch_step) == (6, 1, 2)
    assert (written.scheduler_step, written.val_loss, written.best_val_loss) == (6, 3.5, 3.5)

    fresh = train_state()
    components.load_state_json(fresh, written)
    assert (fresh.data.resumed_from, fresh.data.first_step) == (6, 7)
    assert fresh.schedule.step == 6 and fresh.metrics.best_before == 3.5
    assert fresh.guards.early.state_dict() == saved.guards.early.state_dict()
    assert fresh.guards.divergence.state_dict() == saved.guards.divergence.state_dict()
    assert components.state_json(fresh).to_json() | {"val_loss": 3.5} == written.to_json(), (
        "a resumed registry writes the same state.json (its own val loss aside)"
    )


def test_the_identity_is_checked_before_any_other_part_is_loaded():
    assert next(iter(train_state().parts())) == components.IDENTITY
    saved = train_state(world_size=2)
    _after_steps(saved, 6)
    fresh = train_state(world_size=1)
    with pytest.raises(CheckpointError, match="world size 2; this run has world size 1"):
        components.load_state_json(fresh, components.state_json(saved))
    assert fresh.data.resumed is None and fresh.schedule.step == 0, "nothing loaded"

    other = train_state(config_hash="e" * 64)
    with pytest.raises(CheckpointError, match="written by another run: config hash"):
        components.load_state_json(other, components.state_json(train_state()))
    other.identity.override = True
    components.load_state_json(other, components.state_json(train_state()))


def test_a_scheduler_step_that_is_not_the_optimizer_step_is_refused():
    written = dataclasses.replace(components.state_json(train_state()), step=6, scheduler_step=0)
    with pytest.raises(CheckpointError, match="scheduler step 0 != optimizer step 6"):
        components.load_state_json(train_state(), written)


def test_a_hooks_object_with_only_some_methods_is_adapted_and_a_hooks_is_itself():
    class AfterStepOnly:
        def __init__(self) -> None:
            self.steps: list[int] = []

        def after_step(self, step, record):
            self.steps.append(step)

    partial = AfterStepOnly()
    hooks = as_hooks(partial)
    hooks.on_start(None, None)  # a no-op: the object has no on_start
    hooks.after_step(3, {})
    assert partial.steps == [3]
    mine = Hooks()
    assert as_hooks(mine) is mine and isinstance(as_hooks(None), Hooks)
