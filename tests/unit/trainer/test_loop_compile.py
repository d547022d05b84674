"""torch.compile in the loop (training.compile / --compile): a compiler that fails at the
first step costs one warning, and the run goes on eager with the numbers an eager run gets;
the per-token loss is compiled beside the model; the rotary tables stay out of the graph."""

from __future__ import annotations

import logging

import torch

from tests.unit.trainer.loop_support import TensorSequences, loop_config, one_thread, random_rows
from trainer.model.config import preset
from trainer.model.llama import RotaryEmbedding, build_model
from trainer.train import loop, loss
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


class _Recorder:
    """A torch.compile that records what it was given and every graph Dynamo captured,
    and runs those graphs as traced (no C++ compiler needed)."""

    def __init__(self, real_compile):
        self.real_compile = real_compile
        self.targets: list = []
        self.graphs: list[torch.fx.GraphModule] = []

    def backend(self, graph_module, example_inputs):
        self.graphs.append(graph_module)
        return graph_module.forward

    def __call__(self, target, **_):
        self.targets.append(target)
        return self.real_compile(target, backend=self.backend)

    def calls(self, *names) -> list[str]:
        """The captured graphs' calls whose target is named one of ``names``."""
        return [
            str(node.target)
            for graph in self.graphs
            for node in graph.graph.nodes
            if node.op in ("call_function", "call_method")
            and getattr(node.target, "__name__", str(node.target)) in names
        ]


def test_the_loop_compiles_the_loss_beside_the_model_and_trains_as_eager(monkeypatch):
    recorder = _Recorder(torch.compile)
    monkeypatch.setattr(loop.torch, "compile", recorder)
    torch._dynamo.reset()
    compiled = _run({"training.compile": True})
    torch._dynamo.reset()
    assert loss.token_losses in recorder.targets, recorder.targets
    assert recorder.calls("cross_entropy"), "no captured graph computes the cross-entropy"
    eager = _run({})
    assert compiled.steps_run == eager.steps_run == 4
    # The recorder runs the captured graphs as traced: the same ops in the same order.
    assert compiled.losses == eager.losses
    assert compiled.grad_norms == eager.grad_norms
    assert compiled.val_losses == eager.val_losses


def test_rotary_tables_enter_the_compiled_graph_as_inputs_not_as_recomputed_ops(monkeypatch):
    """Compiled, cos/sin are computed once, eagerly, and read by every layer; inlined into
    the graph, Inductor recomputed them per element of q and k in every layer."""
    model = build_model(preset("tiny"), seed=0)
    ids = torch.randint(
        0, preset("tiny").vocab_size, (2, 16), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        eager = model(ids)
    recorder = _Recorder(torch.compile)
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = recorder(model)(ids)
    assert recorder.graphs and not recorder.calls("cos", "sin"), recorder.calls("cos", "sin")
    assert torch.equal(compiled, eager)
    # Positive control: the same check sees the tables' ops when the rotary is traced.
    monkeypatch.setattr(RotaryEmbedding, "forward", RotaryEmbedding.forward.__wrapped__)
    inlined = _Recorder(torch.compile)
    torch._dynamo.reset()
    with torch.no_grad():
        inlined(model)(ids)
    torch._dynamo.reset()
    assert inlined.calls("cos", "sin"), "the check cannot see cos/sin in a graph"
