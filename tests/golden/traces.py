"""Golden traces: the per-step numbers of two fixed CPU runs, committed and compared.

A golden trace is the cheapest net for bugs nobody named: an off-by-one in the schedule, a
batch read from the wrong epoch, a lost optimizer state on resume, a step taken twice all
move at least one number. Each trace is a run of the training loop at a fixed seed on one
CPU thread, with deterministic algorithms:

- ``quickstart``: configs/quickstart-cpu.yaml's model (4 layers, hidden 128, V = 2048),
  optimizer, micro-batch, sequence length and seed; its schedule scaled to 15 steps (warmup
  2) and a 40-sequence data set, so the run crosses two epoch boundaries (5 steps an epoch).
- ``tiny``: the tiny preset as defined (V = 512), seq_len 32, micro-batch 4 x gradient
  accumulation 2, 13 steps over 40 sequences (epochs 0, 1, 2), an evaluation every 4 steps.

Each is recorded twice and must give the same trace both ways: straight through, and
stopped after step ``resume_after`` with a checkpoint, then resumed in a new call (the path
`trainer apply --stop-after` then `--resume latest` takes). The data is a seeded token chain
(each token a fixed affine map of the one before, plus small noise): learnable, independent
of the Python version (the embedded corpus is the standard library's source, which is not).

**float64, so that the trace is a fact about the loop and not about the CPU.** The run is
the real loop and model with torch's default dtype set to float64 (weights, activations,
gradients, AdamW moments; RMSNorm and RoPE compute in at least float32, so in float64
here). In float32 the kernels a CPU picks (MKL's and ATen's code paths for AVX2, AVX-512,
Intel or AMD) round differently and training amplifies it: the grad norm of the
quickstart trace moves by up to 6.8e-4 relative between kernel families on one machine,
more than a small bug does. In float64 the same comparison moves it by at most 3.1e-13
(``python -m tests.golden.drift`` re-measures both under forced code paths and writes
evidence/benchmarks/golden-trace-drift.json). The float64 numbers are held to a relative
1e-9 (tests/unit/trainer/test_golden_traces.py FLOAT_RTOL): over 3,000 times the drift
measured, and 700 times below the smallest seeded bug of that test (a learning rate 1e-6
off moves the loss by 7e-7). Step, epoch, learning rate (pure Python arithmetic) and data
indices are exact.

Per step the trace keeps the epoch, the loss, the pre-clip gradient norm and the learning
rate (as float.hex), the validation loss at evaluation steps, and the first data indices
of the step's first micro-batch. Regenerate, after a change that is MEANT to move the
numbers (and say why in the commit message):

    .venv/bin/python -m tests.golden.traces --write

The file says where it was recorded (``recorded_on``), for the reader: no comparison
depends on it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from trainer.config.in_code import config_from_values, with_values
from trainer.config.load import load_config
from trainer.config.sections import RunConfig
from trainer.model.config import preset
from trainer.store.registry import HOME_ENV
from trainer.train import loss
from trainer.train.loop import train
from trainer.train.options import RunOptions

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
QUICKSTART = ROOT / "configs" / "quickstart-cpu.yaml"
FIRST_INDICES = 4  # of each step's first micro-batch
TOKEN_SEED = 20261125


@dataclass(frozen=True)
class TraceSpec:
    name: str
    steps: int
    resume_after: int
    train_sequences: int
    val_sequences: int


SPECS = {
    "quickstart": TraceSpec(
        "quickstart", steps=15, resume_after=7, train_sequences=40, val_sequences=4
    ),
    "tiny": TraceSpec("tiny", steps=13, resume_after=6, train_sequences=40, val_sequences=6),
}


class TokenRows:
    """A SequenceSource over rows of ``seq_len + 1`` tokens held in memory."""

    def __init__(self, rows: Tensor) -> None:
        self.rows = rows
        self.num_sequences = rows.shape[0]
        self.seq_len = rows.shape[1] - 1
        self.pad_id = None

    def batch(self, indices: list[int]) -> tuple[Tensor, Tensor]:
        return loss.next_token_pairs(self.rows[list(indices)], pad_id=None)


def token_chain(n: int, seq_len: int, vocab_size: int, seed: int) -> Tensor:
    """``n`` rows of ``seq_len + 1`` tokens: t[i+1] = (31 t[i] + 7 + noise) mod V, noise in
    0..3, the first token uniform. torch's CPU generator is stable across versions."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.empty(n, seq_len + 1, dtype=torch.int64)
    rows[:, 0] = torch.randint(0, vocab_size, (n,), generator=generator)
    noise = torch.randint(0, 4, (n, seq_len), generator=generator)
    for i in range(seq_len):
        rows[:, i + 1] = (31 * rows[:, i] + 7 + noise[:, i]) % vocab_size
    return rows


def base_config(name: str) -> RunConfig:
    """The run a trace records, over in-memory token rows (no shards or tokenizer)."""
    spec = SPECS[name]
    if name == "quickstart":
        cfg = load_config(QUICKSTART)
        return with_values(
            cfg,
            {
                "data.shards": None,
                "data.tokenizer": None,
                "training.epochs": 3,
                "training.max_steps": spec.steps,
                "training.warmup_steps": 2,
                "training.eval_interval": 5,
                "training.eval_tokens": 4 * cfg.data.seq_len,
            },
        )
    return config_from_values(
        preset("tiny"),
        data={"micro_batch": 4, "seq_len": 32},
        optimizer={"lr": 3e-3, "min_lr": 3e-4, "grad_clip": 1.0},
        training={
            "seed": 1234,
            "gradient_accumulation": 2,
            "epochs": 3,
            "max_steps": spec.steps,
            "warmup_steps": 2,
            "eval_interval": 4,
            "eval_tokens": 6 * 32,
        },
    )


def _data(config: RunConfig, spec: TraceSpec) -> tuple[TokenRows, TokenRows]:
    vocab, seq_len = config.model.vocab_size, config.data.seq_len
    train_rows = token_chain(spec.train_sequences, seq_len, vocab, TOKEN_SEED)
    val_rows = token_chain(spec.val_sequences, seq_len, vocab, TOKEN_SEED + 1)
    return TokenRows(train_rows), TokenRows(val_rows)


class _FirstIndices:
    """Loop hooks keeping the first data indices of each step's first micro-batch."""

    def __init__(self) -> None:
        self.indices: dict[int, list[int]] = {}

    def step_batches(self, step, epoch, indices, micro_batches) -> None:
        self.indices[step] = list(indices[0][:FIRST_INDICES])


def _steps(result, hooks: _FirstIndices) -> list[dict]:
    val = dict(result.val_losses)
    steps = []
    for record in result.records:
        step = record["step"]
        entry = {
            "step": step,
            "epoch": record["epoch"],
            "loss": float(record["loss"]).hex(),
            "grad_norm": float(record["grad_norm"]).hex(),
            "lr": float(record["lr"]).hex(),
            "indices": hooks.indices[step],
        }
        if step in val:
            entry["val_loss"] = float(val[step]).hex()
        steps.append(entry)
    return steps


def _train(config: RunConfig, spec: TraceSpec, options: RunOptions = RunOptions()) -> list[dict]:
    hooks = _FirstIndices()
    train_data, val_data = _data(config, spec)
    result = train(config, train_data, val_data, options=options, hooks=hooks)
    return _steps(result, hooks)


#: The dtype the traces train in (module docstring: why float64).
DTYPE = torch.float64


def recorded_on() -> dict:
    """Where a trace was recorded: for the reader of the file, never compared."""
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
    }


@contextlib.contextmanager
def _trace_numerics(dtype: torch.dtype) -> Iterator[None]:
    """``dtype`` by default and one thread (reductions split over threads may round
    differently), both restored after."""
    threads, before = torch.get_num_threads(), torch.get_default_dtype()
    torch.set_num_threads(1)
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
        torch.set_num_threads(threads)


def record(name: str, *, resume: bool, dtype: torch.dtype = DTYPE) -> list[dict]:
    """The trace of run ``name``: straight through, or stopped and resumed once.
    ``dtype`` other than float64 only to measure what float64 buys (tests/golden/drift.py)."""
    spec = SPECS[name]
    config = base_config(name)
    with _trace_numerics(dtype):
        if not resume:
            return _train(config, spec)
        with tempfile.TemporaryDirectory(prefix=f"golden-{name}-") as tmp:
            # A run with a directory registers itself: in a registry of its own, never the
            # user's (trainer/store/registry.py).
            home = os.environ.get(HOME_ENV)
            os.environ[HOME_ENV] = str(Path(tmp) / "home")
            try:
                # Stopped early with the schedule kept (trainer apply --stop-after), resumed.
                run = RunOptions(device="cpu", out_dir=Path(tmp) / "run", checkpoint=True)
                first = dataclasses.replace(run, stop_after=spec.resume_after)
                second = dataclasses.replace(run, resume_from="latest")
                return _train(config, spec, first) + _train(config, spec, second)
            finally:
                if home is None:
                    os.environ.pop(HOME_ENV, None)
                else:
                    os.environ[HOME_ENV] = home


def trace_file(name: str) -> Path:
    return HERE / f"{name}.json"


def document(name: str) -> dict:
    spec = SPECS[name]
    return {
        "trace": name,
        "regenerate": "python -m tests.golden.traces --write",
        "dtype": str(DTYPE).removeprefix("torch."),
        "recorded_on": recorded_on(),
        "resume_after": spec.resume_after,
        "steps": record(name, resume=False),
    }


def render(doc: dict) -> str:
    """JSON with one line per step, so a changed step is one line of the diff."""
    head = json.dumps({k: v for k, v in doc.items() if k != "steps"}, indent=1)[:-2]
    steps = ",\n  ".join(json.dumps(step) for step in doc["steps"])
    return f'{head},\n "steps": [\n  {steps}\n ]\n}}\n'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden.traces", description=__doc__)
    parser.add_argument("--write", action="store_true", help="rewrite the committed traces")
    parser.add_argument("names", nargs="*", default=sorted(SPECS))
    args = parser.parse_args(argv)
    for name in args.names:
        doc = document(name)
        resumed = record(name, resume=True)
        if resumed != doc["steps"]:
            print(f"{name}: the resumed run's trace differs from the straight one", file=sys.stderr)
            return 1
        text = render(doc)
        if args.write:
            trace_file(name).write_text(text, encoding="utf-8")
            print(f"wrote {trace_file(name).relative_to(ROOT)} ({len(doc['steps'])} steps)")
        else:
            sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
