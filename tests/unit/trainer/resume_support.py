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

from tests.unit.trainer.loop_support import TensorSequences, random_rows, settings
from trainer.checkpoint.optimizer_state import optimizer_tensors
from trainer.train.loop import LoopSettings, train


def run_settings(spec: dict) -> LoopSettings:
    return settings(
        seed=7,
        micro_batch=2,
        grad_accum=2,
        epochs=spec.get("epochs", 2),
        max_steps=spec["max_steps"],
        schedule_steps=spec["schedule_steps"],
        warmup_steps=2,
        save_interval=spec.get("save_interval"),
        checkpoint_dir=Path(spec["checkpoint_dir"]) if spec.get("checkpoint_dir") else None,
        resume_from=spec.get("resume"),
    )


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
    result = train(run_settings(spec), data(), None, hooks=consumer)
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
    max_steps: int
    schedule_steps: int
    save_interval: int | None = None
    checkpoint_dir: str | None = None
    resume: str | None = None


def tensors_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Names whose tensors differ bitwise (or exist on one side only)."""
    differ = sorted(set(a) ^ set(b))
    differ += [k for k in sorted(set(a) & set(b)) if not torch.equal(a[k], b[k])]
    return differ
