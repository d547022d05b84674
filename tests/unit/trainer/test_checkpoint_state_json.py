"""state.json is read one way (issue 31): every field type-checked, and `trainer inspect`
and a resume agree on it - what inspect calls valid a resume loads, what a resume refuses
inspect reports with the same reason, a CheckpointError naming the file and the field,
never a TypeError or ValueError out of a loader.

    .venv/bin/pytest -q tests/unit/trainer/test_checkpoint_state_json.py
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit.trainer.checkpoint_support import HASH, TINY, fresh, save, trained
from tests.unit.trainer.test_components import train_state
from trainer.checkpoint import load
from trainer.checkpoint.layout import CHECKPOINT_STATE_FILE, MANIFEST_FILE, CheckpointError
from trainer.checkpoint.manifest import file_entry
from trainer.checkpoint.state import TrainingState, state_from_json
from trainer.checkpoint.verify import inspect_checkpoint
from trainer.train import checkpointing, components, guards

GOOD_DIVERGENCE = {"vocab_size": TINY.vocab_size, "previous": 3.5, "evals": 1}
GOOD_EARLY = {"patience": 5, "min_evals": 3, "best": 3.5, "best_eval": 1, "evals": 1}

#: A wrong value of every field of state.json, and the words its refusal says. A field
#: added to TrainingState without a check here fails test_every_field_has_a_refused_value.
WRONG: dict[str, list[tuple[object, str]]] = {
    "step": [("3", 'step is "3", not an integer >= 0'), (True, "step is true")],
    "epoch": [(-1, "epoch is -1, not an integer >= 0")],
    "epoch_step": [(1.5, "epoch_step is 1.5, not an integer >= 0")],
    "scheduler_step": [(None, "scheduler_step is null"), (0, "scheduler step 0 != optimizer")],
    "config_hash": [(7, "config_hash is 7, not a string")],
    "data_manifest_sha256": [(["d"], 'data_manifest_sha256 is ["d"], not a string or null')],
    "val_loss": [("low", 'val_loss is "low", not a finite number or null')],
    "best_val_loss": [(float("nan"), "best_val_loss is NaN, not a finite number")],
    "early_stopping": [
        ([1], "early_stopping is [1], not null or an object of patience"),
        ({**GOOD_EARLY, "best": "x"}, 'early_stopping.best is "x", not a finite number'),
        ({"patience": 5}, "early_stopping is missing min_evals"),
    ],
    "divergence": [
        (5, "divergence is 5, not null or an object of vocab_size, previous, evals"),
        ({**GOOD_DIVERGENCE, "previous": "abc"}, 'divergence.previous is "abc", not a finite'),
        ({**GOOD_DIVERGENCE, "evals": 1.0}, "divergence.evals is 1.0, not an integer >= 0"),
        ({"vocab_size": 64}, "divergence is missing previous, evals"),
    ],
    "seed": [("7", 'seed is "7", not an integer or null')],
    "tokenizer_dir": [(3, "tokenizer_dir is 3, not a string or null")],
    "optimizer_groups": [
        ({}, "optimizer_groups is {}, not a list of parameter groups"),
        ([{"params": [1]}], "optimizer_groups[0] is"),
    ],
    "world_size": [(0, "world_size is 0, not an integer >= 1"), ("2", 'world_size is "2"')],
}
CASES = [(field, value, words) for field, values in WRONG.items() for value, words in values]


def _state(step: int = 3) -> dict:
    """A state.json as the loop writes it after ``step`` steps, guards and all."""
    state = components.state_json(train_state())
    return dataclasses.replace(
        state,
        step=step,
        scheduler_step=step,
        epoch=0,
        epoch_step=step,
        early_stopping=GOOD_EARLY,
        divergence=GOOD_DIVERGENCE,
        val_loss=3.5,
        best_val_loss=3.5,
    ).to_json()


def test_every_field_has_a_refused_value():
    assert {f.name for f in dataclasses.fields(TrainingState)} == set(WRONG)


def test_the_state_the_loop_writes_is_read_back_as_it_was():
    """Two-sided: the checks refuse the values above, never a state the loop writes."""
    state = _state()
    assert state_from_json(state).to_json() == state
    assert state_from_json({**state, "divergence": None, "early_stopping": None}).step == 3


def refusal(call: Callable[[], object]) -> str:
    """What ``call`` says as it refuses: ``refused: MESSAGE`` for a CheckpointError,
    ``accepted`` when it returns, ``crashed: TypeError: ...`` for any other exception (the
    bug these tests name), for the assertion to show."""
    try:
        call()
    except CheckpointError as exc:
        return f"refused: {exc}"
    except Exception as exc:
        return f"crashed: {type(exc).__name__}: {exc}"
    return "accepted"


@pytest.mark.parametrize(("field", "value", "words"), CASES)
def test_a_wrong_value_is_a_checkpoint_error_naming_the_file_and_the_field(field, value, words):
    said = refusal(lambda: state_from_json({**_state(), field: value}, source="ckpt/state.json"))
    assert said.startswith("refused: ckpt/state.json: ") and words in said, said


# ---------------------------------------------------------------- inspect and resume agree


@pytest.fixture(scope="module")
def model_and_optimizer():
    return trained(steps=1)


def _saved(run: Path, model_and_optimizer, state: dict) -> Path:
    """A checkpoint of step 3 whose state.json is rewritten with ``state`` (its manifest
    entry rehashed, so only the contents can be wrong)."""
    model, optimizer = model_and_optimizer
    ckpt = save(run, 3, model, optimizer)
    path = ckpt / CHECKPOINT_STATE_FILE
    path.write_text(json.dumps({**json.loads(path.read_text()), **state}))
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    manifest["files"][CHECKPOINT_STATE_FILE] = file_entry(path)
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))
    return ckpt


def _registry() -> components.TrainState:
    """The parts of a run of checkpoint_support's model and identity (whose checkpoints
    these are), as the loop registers them."""
    model, optimizer = fresh(seed=1)
    return components.TrainState(
        identity=components.RunIdentity(HASH, "d" * 64, seed=0, tokenizer_dir=None, world_size=1),
        data=components.DataPosition(),
        schedule=components.SchedulePosition(),
        guards=components.Guards(guards.DivergenceGuard(TINY.vocab_size), guards.EarlyStopping()),
        metrics=components.ValidationHistory(),
        model=model,
        optimizer=optimizer,
        rng=components.RngState(),
    )


def _resume(ckpt: Path) -> str:
    """refusal() of a resume from ``ckpt`` (the loop's own resume)."""
    return refusal(lambda: checkpointing.resume(ckpt, ckpt.parent, _registry()))


DAMAGE = {
    "divergence-an-integer": (
        {"divergence": 5},
        "divergence is 5, not null or an object of vocab_size, previous, evals",
    ),
    "divergence-previous-a-string": (
        {"divergence": {"vocab_size": 64, "previous": "x", "evals": 1}},
        'divergence.previous is "x"',
    ),
    "step-not-the-directory's": (
        {"step": 4, "scheduler_step": 4},
        "step 4, but the checkpoint is step 3 (its manifest and its name step-00000003)",
    ),
    "scheduler-behind": ({"scheduler_step": 2}, "scheduler step 2 != optimizer step 3"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_what_resume_refuses_inspect_reports_with_the_same_reason(
    case, tmp_path, model_and_optimizer
):
    fields, reason = DAMAGE[case]
    ckpt = _saved(tmp_path / "run", model_and_optimizer, fields)
    report = inspect_checkpoint(ckpt)
    assert not report.valid, f"inspect calls valid what resume refuses ({case})"
    said = [p for p in report.problems if reason in p]
    assert said, report.problems
    refused = _resume(ckpt)
    assert refused.startswith("refused: ") and said[0] in refused, (said[0], refused)
    # `latest` falls back past it like past any invalid checkpoint, saying the same.
    chosen, skipped = load.latest_valid(tmp_path / "run")
    assert chosen is None and reason in skipped[0][1]


def test_a_checkpoint_inspect_calls_valid_is_one_resume_loads(tmp_path, model_and_optimizer):
    """Two-sided: the undamaged checkpoint, guards filled in, is valid and loads."""
    ckpt = _saved(tmp_path / "run", model_and_optimizer, _guarded_state())
    assert inspect_checkpoint(ckpt).valid, inspect_checkpoint(ckpt).problems
    assert _resume(ckpt) == "accepted"


def _guarded_state() -> dict:
    return {"divergence": GOOD_DIVERGENCE, "early_stopping": GOOD_EARLY, "val_loss": 3.5}


def test_a_guard_state_of_another_run_is_a_checkpoint_error_not_a_value_error():
    """A divergence guard of another vocabulary is the run's business, not the file's:
    inspect cannot know it, and resume refuses it as a CheckpointError like every part."""
    saved = components.state_json(train_state())
    saved = dataclasses.replace(saved, divergence={**GOOD_DIVERGENCE, "vocab_size": 50257})
    registry = train_state()  # its divergence guard is of vocabulary 64
    said = refusal(lambda: components.load_state_json(registry, saved))
    assert said.startswith("refused: ") and "vocab_size 50257" in said, said
    assert "this guard has 64" in said and registry.guards.divergence.evals == 0, said
