"""state.json: where the run is (step, data position, schedule, early stopping, identity).

    state = state_from_json(obj, source="ckpt/state.json")   # CheckpointError naming field
    problem = scheduler_problem(state.step, state.scheduler_step)   # None when they agree

The data order is a pure function of (seed, epoch) (trainer/train/sequences.py), so the
data position is (epoch, step): the next step's batch is recomputed, never replayed.
config_hash and data_manifest_sha256 let a resume refuse another run's checkpoint.

state_from_json is the one reading of the file: `trainer inspect` (verify.py) and a
resume (load.py) both go through it, so what inspect calls valid a resume loads, and
what a resume refuses inspect reports with the same words. Every field is checked for
its JSON type (a bool is no integer), the counts for their range, the nested guard
states (``divergence``, ``early_stopping``) for the keys and types their guards read,
``scheduler_step`` against ``step``, and ``optimizer_groups`` for the parameter names
the optimizer file is restored by; a wrong value is a CheckpointError naming the file
and the field, never a TypeError out of a loader.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gates.io.files import canonical_sha256
from trainer.checkpoint.layout import CheckpointError


@dataclass(frozen=True)
class TrainingState:
    step: int  # optimizer steps completed
    epoch: int  # 0-based epoch of the last completed step
    epoch_step: int  # steps of that epoch completed: the data position is (epoch, epoch_step)
    scheduler_step: int  # the step lr_at was last evaluated at
    config_hash: str  # sha256 of the resolved run config (config_hash())
    data_manifest_sha256: str | None  # sha256 of the data set's manifest.json
    val_loss: float | None = None  # the last validation loss (retention keeps the best)
    best_val_loss: float | None = None
    early_stopping: dict[str, Any] | None = None  # guards.EarlyStopping.state_dict()
    divergence: dict[str, Any] | None = None  # guards.DivergenceGuard.state_dict()
    seed: int | None = None
    tokenizer_dir: str | None = None  # exported next to the weights when set
    optimizer_groups: list[dict[str, Any]] = field(default_factory=list)
    # Data-parallel ranks of the run: the data split and the per-rank RNG states depend
    # on it, so a resume on another world size is refused (trainer/train/loop.py).
    world_size: int = 1

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_REQUIRED = ("step", "epoch", "epoch_step", "scheduler_step", "config_hash", "data_manifest_sha256")

# ------------------------------------------------------------------ what a value may be
#: (test, words): whether a JSON value is of a kind, and the kind in a message.
Kind = tuple[Callable[[Any], bool], str]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


COUNT: Kind = (lambda v: _is_int(v) and v >= 0, "an integer >= 0")
POSITIVE: Kind = (lambda v: _is_int(v) and v >= 1, "an integer >= 1")
TEXT: Kind = (lambda v: isinstance(v, str), "a string")
FINITE: Kind = (lambda v: _is_number(v) and math.isfinite(v), "a finite number")


def _or_null(kind: Kind) -> Kind:
    test, words = kind
    return (lambda v: v is None or test(v), f"{words} or null")


#: The top-level fields but the nested ones (guards, optimizer groups), and their kinds.
_FIELDS: dict[str, Kind] = {
    "step": COUNT,
    "epoch": COUNT,
    "epoch_step": COUNT,
    "scheduler_step": COUNT,
    "config_hash": TEXT,
    "data_manifest_sha256": _or_null(TEXT),
    "val_loss": _or_null(FINITE),
    "best_val_loss": _or_null(FINITE),
    "seed": _or_null((_is_int, "an integer")),
    "tokenizer_dir": _or_null(TEXT),
    "world_size": POSITIVE,
}
#: What each guard's load_state_dict reads (trainer/train/guards.py state_dict()).
_GUARDS: dict[str, dict[str, Kind]] = {
    "divergence": {"vocab_size": (lambda v: _is_int(v) and v >= 2, "an integer >= 2"),
                   "previous": _or_null(FINITE), "evals": COUNT},
    "early_stopping": {"patience": POSITIVE, "min_evals": POSITIVE,
                       "best": _or_null(FINITE), "best_eval": COUNT, "evals": COUNT},
}  # fmt: skip


def _shown(value: Any) -> str:
    """A value as its JSON, cut short (a message quotes it, never a whole object)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _wrong(name: str, value: Any, words: str) -> str:
    return f"{name} is {_shown(value)}, not {words}"


def _guard_problems(name: str, value: Any) -> list[str]:
    keys = _GUARDS[name]
    if value is None:
        return []
    if not isinstance(value, dict):
        return [_wrong(name, value, f"null or an object of {', '.join(keys)}")]
    missing = [k for k in keys if k not in value]
    if missing:
        return [f"{name} is missing {', '.join(missing)}"]
    return [
        _wrong(f"{name}.{k}", value[k], words)
        for k, (test, words) in keys.items()
        if not test(value[k])
    ]


def _groups_problems(groups: Any) -> list[str]:
    """optimizer_groups: a list of objects, each naming its parameters (strings)."""
    if not isinstance(groups, list):
        return [_wrong("optimizer_groups", groups, "a list of parameter groups")]
    for index, group in enumerate(groups):
        params = group.get("params") if isinstance(group, dict) else None
        if not (isinstance(params, list) and all(isinstance(p, str) for p in params)):
            return [
                _wrong(
                    f"optimizer_groups[{index}]",
                    group,
                    'an object naming its parameters ({"params": ["name", ...], ...})',
                )
            ]
    return []


def scheduler_problem(step: int, scheduler_step: int) -> str | None:
    """Why a state whose LR schedule stands at ``scheduler_step`` cannot be the state
    after optimizer step ``step`` (None: it can). A resume's schedule part
    (trainer/train/components.py SchedulePosition) says the same."""
    if scheduler_step != step:
        return f"scheduler step {scheduler_step} != optimizer step {step}"
    return None


def state_problems(obj: Any) -> list[str]:
    """Everything wrong with a parsed state.json ``obj``, each as ``field ...: why``
    ([] when it is a training state a resume can load)."""
    if not isinstance(obj, dict):
        return [f"not a JSON object, but {_shown(obj)}"]
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        return [f"missing {', '.join(missing)}"]
    known = {f.name for f in dataclasses.fields(TrainingState)}
    unknown = sorted(set(obj) - known)
    if unknown:
        return [f"unknown fields {', '.join(unknown)}"]
    problems = [
        _wrong(name, obj[name], words)
        for name, (test, words) in _FIELDS.items()
        if name in obj and not test(obj[name])
    ]
    for name in _GUARDS:
        problems += _guard_problems(name, obj.get(name))
    problems += _groups_problems(obj.get("optimizer_groups", []))
    if not problems:
        problem = scheduler_problem(obj["step"], obj["scheduler_step"])
        problems += [problem] if problem else []
    return problems


def state_from_json(obj: Any, *, source: str = "state.json") -> TrainingState:
    """The TrainingState of a parsed state.json; CheckpointError naming ``source`` and
    every field that is wrong otherwise (state_problems)."""
    problems = state_problems(obj)
    if problems:
        raise CheckpointError(f"{source}: {'; '.join(problems)}")
    values = dict(obj)
    for name in ("val_loss", "best_val_loss"):
        if values.get(name) is not None:
            values[name] = float(values[name])
    return TrainingState(**values)


def config_hash(resolved_config: dict[str, Any]) -> str:
    """sha256 of the config as canonical JSON (sorted keys): equal configs, equal hashes."""
    return canonical_sha256(resolved_config)
