"""Shared set-up for the training-loop tests: a tiny model, in-memory sequences, the run
config of them (loop_config), and hooks that record what the loop did without patching it."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from trainer.config.in_code import config_from_values, with_values
from trainer.config.sections import RunConfig
from trainer.data.encode import encode_corpus
from trainer.model.config import LlamaConfig, preset
from trainer.model.llama import build_model
from trainer.tokenizer import bpe
from trainer.tokenizer.model import ByteLevelBPE
from trainer.tokenizer.pretokenize import count_words
from trainer.train import loss
from trainer.train.hooks import Hooks

VOCAB = 64


@contextlib.contextmanager
def single_intra_op_thread():
    """torch on one intra-op thread for the block, the count restored after. For module-
    and session-scoped fixtures, which are set up before the autouse ``one_thread``: a run
    they make must use the thread count of the runs the tests compare it with, since a
    kernel's result can depend on it (MKL's AVX2 sgemm does)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on one intra-op thread: on a shared 2-core machine two threads spend
    their time waiting on each other (about 10x slower for hidden 16). Import this
    fixture into a test module to apply it there; the thread count is restored after."""
    with single_intra_op_thread():
        yield


def tiny_config(vocab_size: int = VOCAB, hidden: int = 16) -> LlamaConfig:
    return dataclasses.replace(
        preset("tiny"),
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=None,
        max_position_embeddings=64,
    )


class TensorSequences:
    """A SequenceSource over rows of ``seq_len + 1`` tokens held in memory."""

    def __init__(self, rows: Tensor, pad_id: int | None = None) -> None:
        self.rows = rows.to(torch.int64)
        self.num_sequences = rows.shape[0]
        self.seq_len = rows.shape[1] - 1
        self.pad_id = pad_id

    def batch(self, indices: Sequence[int]) -> tuple[Tensor, Tensor]:
        return loss.next_token_pairs(self.rows[list(indices)], pad_id=self.pad_id)


def random_rows(n: int, seq_len: int, seed: int, vocab_size: int = VOCAB) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (n, seq_len + 1), generator=generator)


def loop_config(values: dict[str, Any] | None = None) -> RunConfig:
    """The tests' run, built in code over in-memory sequences (no shards, no tokenizer on
    disk): the tiny model, 2 x 2 sequences of 8 tokens a step, 12 steps over 3 epochs;
    ``values`` (dotted keys, trainer.config.in_code.with_values) replace any of it."""
    base = config_from_values(
        tiny_config(),
        data={"micro_batch": 2, "seq_len": 8},
        optimizer={"lr": 1e-2, "min_lr": 1e-3, "weight_decay": 0.1, "grad_clip": 1.0},
        training={
            "seed": 1234,
            "gradient_accumulation": 2,
            "epochs": 3,
            "max_steps": 12,
            "warmup_steps": 1,
            "eval_interval": 1000,
            "eval_tokens": 131_072,
        },
    )
    return with_values(base, values or {})


class Recorder(Hooks):
    """Loop hooks that keep what each step consumed and saw."""

    def __init__(self) -> None:
        self.model = None
        self.optimizer = None
        self.batches: dict[int, tuple[int, list[list[int]], list]] = {}
        self.lrs: dict[int, list[tuple[str, float]]] = {}
        self.before_step: dict[int, dict[str, Tensor]] = {}
        self.steps: list[int] = []
        self.evaluations: list[tuple[int, list, float]] = []
        self.snapshot_before_step = False

    def on_start(self, model, optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def step_batches(self, step, epoch, indices, micro_batches) -> None:
        self.batches[step] = (epoch, indices, micro_batches)

    def before_optimizer_step(self, step, optimizer, model) -> None:
        self.lrs[step] = [(g["name"], g["lr"]) for g in optimizer.param_groups]
        if self.snapshot_before_step:
            self.before_step[step] = copy.deepcopy(model.state_dict())

    def after_step(self, step, record) -> None:
        self.steps.append(step)

    def evaluation(self, step, batches, val_loss) -> None:
        self.evaluations.append((step, batches, val_loss))


def recomputed_loss(cfg: LlamaConfig, weights: dict[str, Tensor], micro_batches) -> float:
    """The token-mean cross-entropy of a step's batch, from a fresh model with ``weights``."""
    model = build_model(cfg, seed=0)
    model.load_state_dict(weights)
    inputs = torch.cat([i for i, _ in micro_batches])
    targets = torch.cat([t for _, t in micro_batches])
    with torch.no_grad():
        logits = model(inputs).double()
    return torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=loss.IGNORE_INDEX
    ).item()


def float64_grad_norm(model) -> float:
    total = sum(
        float((p.grad.double() ** 2).sum()) for p in model.parameters() if p.grad is not None
    )
    return math.sqrt(total)


# ---------------------------------------------------------------- a corpus and a run config
EOT = "<|endoftext|>"
_WORDS = ("the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "log", "red", "blue")


def corpus_texts(count: int = 48) -> list[str]:
    """Small repetitive English-like documents: a model learns them within 20 steps."""
    texts = []
    for i in range(count):
        words = [_WORDS[(i * 7 + j * (i % 5 + 1)) % len(_WORDS)] for j in range(40)]
        texts.append(f"story {i}: " + " ".join(words) + ".\n")
    return texts


def encode_test_corpus(root: Path) -> tuple[Path, Path]:
    """BPE tokenizer and train/val shards of corpus_texts() under ``root``: (data, tokenizer)."""
    texts = corpus_texts()
    model = bpe.train_fast(
        count_words(texts), vocab_size=300, min_frequency=2, special_tokens=(EOT,)
    )
    ByteLevelBPE.from_model(model).save(root / "tok")
    files = []
    for i, text in enumerate(texts):
        path = root / "corpus" / f"doc{i:03d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        files.append(path)
    encode_corpus(files, root / "tok", root / "data", val_fraction=0.1)
    return root / "data", root / "tok"


def write_run_config(path: Path, data: Path, tokenizer: Path, out: Path, **training) -> Path:
    """A run config for a tiny model on the encoded test corpus."""
    vocab = ByteLevelBPE.load(tokenizer).vocab_size
    fields = {
        "epochs": 10,
        "max_steps": 20,
        "warmup_steps": 2,
        "eval_interval": 10,
        "save_interval": 1000,
        "output_dir": str(out),
        "force_token_budget": True,
        **training,
    }
    lines = [
        "name: loop-test",
        "model:",
        "  preset: tiny",
        "  architecture:",
        f"    vocab_size: {vocab}",
        "    hidden_size: 32",
        "    intermediate_size: 64",
        "    num_attention_heads: 2",
        "    num_key_value_heads: 1",
        "data:",
        f"  shards: {data}",
        f"  tokenizer: {tokenizer}",
        "  micro_batch: 4",
        "  seq_len: 32",
        "optimizer:",
        "  name: adamw",
        "  lr: 3.0e-3",
        "  weight_decay: 0.1",
        "  grad_clip: 1.0",
        "training:",
        *(f"  {k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in fields.items()),
        "monitoring:",
        "  log_interval: 1",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
