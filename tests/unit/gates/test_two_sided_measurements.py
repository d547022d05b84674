"""Refusal gates are two-sided (issue 19 item 6): each measurement also reports a metric
that an implementation refusing everything (or a model ignoring its context) fails, while
the gate's original metric stays at its passing value.

Each test breaks the measured code by monkeypatching (refuse everything, crash, ignore
context) and checks the new metric moves and the old one does not; the real code scores
0 on the new metric. The measurements are the gate measurements themselves
(tests/measurements/*.py), called with a GateContext.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
import torch

from gates.measure import GateContext
from tests.measurements import (
    llama_370m_sovereign_model,
    llama_370m_sovereign_preflight,
    training_loop_parts,
    training_loop_run,
)
from trainer import model
from trainer.model import llama
from trainer.train import guards, loop

ROOT = Path(__file__).resolve().parents[3]


def _ctx() -> GateContext:
    # The measurements read only ctx.root (and ctx.artifacts, empty here).
    return GateContext(root=ROOT, contract=None, gate=None, artifacts=())  # type: ignore[arg-type]


def _values(measurement) -> dict[str, float]:
    return {k: v for k, (v, _) in measurement.values.items()}


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-003
def test_loop_003_refusing_every_startup_is_counted_as_valid_configs_refused(monkeypatch):
    real = _values(training_loop_run.validation_floor(_ctx()))
    assert real["valid_configs_refused"] == 0
    assert real["min_validation_tokens_with_early_stopping"] == 131_072

    def refuse(target_tokens: int, early_stopping: bool) -> None:
        raise ValueError(f"{target_tokens:,} tokens; early stopping needs at least 131,072")

    monkeypatch.setattr(guards, "check_validation_size", refuse)
    broken = _values(training_loop_run.validation_floor(_ctx()))
    # The old metric still "passes" (inf >= 131,072); the new one does not.
    assert broken["min_validation_tokens_with_early_stopping"] >= 131_072
    assert broken["valid_configs_refused"] == 2  # 131,072 with early stopping, and off


# ---------------------------------------------------------------- GATE-ARCH-370M-006
def test_arch_006_real_check_refuses_as_documented():
    real = _values(llama_370m_sovereign_model.mismatched_vocab_pairs(_ctx()))
    assert real == {
        "mismatched_pairs_accepted": 0,
        "mismatched_pairs_checked": 5,
        "matched_pairs_refused": 0,
        "refusals_by_crash": 0,
        "refusals_not_naming_both_sizes": 0,
    }


def test_arch_006_refusing_every_pair_is_counted_as_matched_pairs_refused(monkeypatch):
    def refuse(model_vocab: int, tokenizer_vocab: int, **_) -> None:
        raise model.VocabMismatchError(
            model_vocab, tokenizer_vocab, f"{model_vocab} {tokenizer_vocab}"
        )

    monkeypatch.setattr(model, "check_vocab_agreement", refuse)
    broken = _values(llama_370m_sovereign_model.mismatched_vocab_pairs(_ctx()))
    assert broken["mismatched_pairs_accepted"] == 0
    assert broken["matched_pairs_refused"] == 1


def test_arch_006_a_crash_is_not_a_refusal(monkeypatch):
    def crash(path) -> int:
        raise KeyError("model")

    monkeypatch.setattr(model, "tokenizer_vocab_size", crash)
    broken = _values(llama_370m_sovereign_model.mismatched_vocab_pairs(_ctx()))
    assert broken["mismatched_pairs_accepted"] == 0
    assert broken["refusals_by_crash"] == 5
    assert broken["matched_pairs_refused"] == 1


def test_arch_006_a_refusal_must_name_both_sizes(monkeypatch):
    def terse(model_vocab: int, tokenizer_vocab: int, **_) -> None:
        if model_vocab != tokenizer_vocab:
            raise model.VocabMismatchError(model_vocab, tokenizer_vocab, "vocab mismatch")

    monkeypatch.setattr(model, "check_vocab_agreement", terse)
    broken = _values(llama_370m_sovereign_model.mismatched_vocab_pairs(_ctx()))
    assert broken["mismatched_pairs_accepted"] == 0
    assert broken["refusals_not_naming_both_sizes"] == 3  # the gapped pairs name the gap
    assert broken["matched_pairs_refused"] == 0


# ---------------------------------------------------------------- GATE-ARCH-370M-011
def _done(returncode: int, stderr: str) -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess([], returncode, "", stderr)


def test_arch_011_a_traceback_or_signal_is_a_crash_not_a_refusal(tmp_path):
    sizes = (50257, 50256)
    refusal = "trainer apply: error: vocabulary preflight: model vocab_size 50257 != 50256"
    traceback = "Traceback (most recent call last):\n  ...\nKeyError: 50257 50256"
    case = llama_370m_sovereign_preflight._case
    assert case(_done(1, refusal), None, tmp_path / "none", sizes)["crashed"] is False
    assert case(_done(1, traceback), None, tmp_path / "none", sizes)["crashed"] is True
    assert case(_done(-9, refusal), None, tmp_path / "none", sizes)["crashed"] is True
    assert case(_done(0, ""), None, tmp_path / "none", sizes)["started"] is True


def test_arch_011_refusing_every_run_is_counted_as_matched_runs_refused(monkeypatch):
    real_trainer = llama_370m_sovereign_preflight._trainer

    def refuse_apply(root: Path, *args: str) -> subprocess.CompletedProcess:
        if args[0] != "apply":
            return real_trainer(root, *args)  # `data encode` runs for real
        return _done(1, "trainer apply: error: refused: 50257 50256 50258 512 513")

    monkeypatch.setattr(llama_370m_sovereign_preflight, "_trainer", refuse_apply)
    broken = _values(llama_370m_sovereign_preflight.mismatched_runs_started(_ctx()))
    assert broken["mismatched_runs_started"] == 0
    assert broken["refusals_by_crash"] == 0
    assert broken["matched_runs_refused"] == 1  # the tiny run; its resumes never happen
    assert broken["mismatched_runs_checked"] == 2  # so only 2 of the 4 mismatched cases


@pytest.mark.slow
def test_arch_011_real_runs_refuse_only_mismatched_ones():
    real = _values(llama_370m_sovereign_preflight.mismatched_runs_started(_ctx()))
    assert real == {
        "mismatched_runs_started": 0,
        "refusals_not_naming_both_sizes": 0,
        "refusals_by_crash": 0,
        "mismatched_runs_checked": 4,
        "matched_runs_refused": 0,
    }


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-010
def test_loop_010_a_model_that_ignores_context_fails_later_positions_unaffected(monkeypatch):
    real = _values(training_loop_parts.causal_objective(_ctx()))
    assert real["future_token_leaks"] == 0
    assert real["later_positions_unaffected"] == 0

    real_build = llama.build_model

    class NoAttention(torch.nn.Module):
        """Logits at position i from token i alone: causal, but blind to the context."""

        def __init__(self, model) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model.lm_head(self.model.model.embed_tokens(ids))

    monkeypatch.setattr(llama, "build_model", lambda cfg, **kw: NoAttention(real_build(cfg, **kw)))
    broken = _values(training_loop_parts.causal_objective(_ctx()))
    assert broken["future_token_leaks"] == 0
    assert broken["later_positions_unaffected"] == 3 * (32 * 31 // 2)  # every i > j


# ---------------------------------------------------------------- GATE-TRAIN-LOOP-001, -002
def test_loop_001_a_run_recording_no_loss_fails_losses_verified(monkeypatch):
    real_train = loop.train

    def forgetful(*args, **kwargs):
        result = real_train(*args, **kwargs)
        return dataclasses.replace(result, records=[])  # no step's loss recorded

    monkeypatch.setattr(loop, "train", forgetful)
    broken = _values(training_loop_run.placeholder_losses(_ctx()))
    assert broken["placeholder_losses"] == 0
    assert broken["losses_verified"] == 0  # the real loop: 12


def test_loop_002_a_loop_that_trains_nothing_fails_the_positive_controls(monkeypatch):
    monkeypatch.setattr(loop, "train", lambda *args, **kwargs: None)
    broken = _values(training_loop_run.validation_tokens_trained_on(_ctx()))
    assert broken["validation_tokens_trained_on"] == 0
    assert broken["training_tokens_searched"] == 0  # the real loop: 1,428
    assert broken["evaluations_searched"] == 0  # the real loop: 3
    assert broken["epochs_trained"] == 0  # the real loop: 3
