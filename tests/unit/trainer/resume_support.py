"""The run the resume tests interrupt and resume: 32 sequences of 8 tokens, 8 steps per
epoch, so a 12-step run crosses an epoch boundary; results written for bitwise compare."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from tests.unit.trainer.loop_support import TensorSequences, loop_config, random_rows
from trainer.checkpoint.optimizer_state import optimizer_tensors
from trainer.config.sections import RunConfig
from trainer.train.loop import train
from trainer.train.options import RunOptions


def run_spec(spec: dict) -> tuple[RunConfig, RunOptions]:
    """The run of ``spec`` (see _Spec) and how this process runs it: checkpoints into
    ``run_dir``/checkpoints when it names one."""
    values = {
        "training.seed": 7,
        "data.micro_batch": 2,
        "training.gradient_accumulation": 2,
        "training.epochs": spec.get("epochs", 2),
        "training.max_steps": spec["max_steps"],
        "training.warmup_steps": 2,
    }
    if spec.get("save_interval") is not None:
        values["training.save_interval"] = spec["save_interval"]
    run_dir = spec.get("run_dir")
    options = RunOptions(
        out_dir=Path(run_dir) if run_dir else None,
        checkpoint=bool(run_dir),
        resume_from=spec.get("resume"),
    )
    return loop_config(values), options


def data() -> TensorSequences:
    return TensorSequences(random_rows(32, 8, seed=3))


class RngConsumer:
    """Draws from torch, random and numpy every step, as dropout or sampling would: the
    training-control RNG the contract's resume test needs. Forwards after_step."""

    def __init__(self, then: object = None) -> None:
        self.then = then
        self.draws: list[list[str]] = []

    def step_batches(self, step, epoch, indices, micro_batches) -> None:
        self.draws.append(
            [torch.rand(1).item().hex(), random.random().hex(), float(np.random.random()).hex()]
        )

    def after_step(self, step: int, record: dict) -> None:
        if self.then is not None:
            self.then.after_step(step, record)


def run_and_record(spec: dict, out_dir: Path, hooks: object = None) -> dict:
    consumer = RngConsumer(hooks)
    config, options = run_spec(spec)
    result = train(config, data(), None, options=options, hooks=consumer)
    record = {
        "rng_draws": consumer.draws,
        "steps": [r["step"] for r in result.records],
        "losses": [float(x).hex() for x in result.losses],
        "grad_norms": [float(x).hex() for x in result.grad_norms],
        "lrs": [float(x).hex() for x in result.lrs],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "result.json").write_text(json.dumps(record), encoding="utf-8")
    opt, _ = optimizer_tensors(result.model, result.optimizer)
    weights = {f"weight:{k}": v.contiguous() for k, v in result.model.state_dict().items()}
    save_file(
        weights | {f"adam:{k}": v for k, v in opt.items()}, str(out_dir / "final.safetensors")
    )
    return record


def replace(spec: dict, **changes: object) -> dict:
    return dataclasses.replace(_Spec(**spec), **changes).__dict__


@dataclasses.dataclass
class _Spec:
    max_steps: int  # training.max_steps: the run's steps and its LR schedule
    save_interval: int | None = None  # None: the config default (past every run here)
    run_dir: str | None = None  # the run directory (checkpoints/ in it); None: no files
    resume: str | None = None  # RunOptions.resume_from
    epochs: int = 2


def tensors_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Names whose tensors differ bitwise (or exist on one side only)."""
    differ = sorted(set(a) ^ set(b))
    differ += [k for k in sorted(set(a) & set(b)) if not torch.equal(a[k], b[k])]
    return differ
