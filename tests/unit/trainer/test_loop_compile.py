"""torch.compile in the loop (training.compile / --compile): a compiler that fails at the
first step costs one warning, and the run goes on eager with the numbers an eager run gets."""

from __future__ import annotations

import logging

import torch

from tests.unit.trainer.loop_support import TensorSequences, loop_config, one_thread, random_rows
from trainer.train import loop
from trainer.train.loop import train

__all__ = ["one_thread"]  # the fixture applies to this module


def _failing_backend(graph_module, example_inputs):
    raise RuntimeError("no C++ compiler on this machine (test backend)")


def _run(values: dict):
    config = loop_config({"training.max_steps": 4, "training.eval_interval": 2, **values})
    rows = random_rows(8, 8, seed=3)
    return train(config, TensorSequences(rows), TensorSequences(rows[:4]))


def test_a_failing_compiler_falls_back_to_eager_with_one_warning(monkeypatch, caplog):
    real_compile = torch.compile
    monkeypatch.setattr(
        loop.torch, "compile", lambda module: real_compile(module, backend=_failing_backend)
    )
    torch._dynamo.reset()
    with caplog.at_level(logging.WARNING, logger=loop.__name__):
        fell_back = _run({"training.compile": True})
    torch._dynamo.reset()
    warnings = [r for r in caplog.records if "torch.compile failed" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    eager = _run({})
    assert fell_back.steps_run == eager.steps_run == 4
    assert fell_back.losses == eager.losses  # bitwise: the failed step was redone, once
    assert fell_back.grad_norms == eager.grad_norms
    assert fell_back.val_losses == eager.val_losses
    for (name, a), (_, b) in zip(
        fell_back.model.state_dict().items(), eager.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
