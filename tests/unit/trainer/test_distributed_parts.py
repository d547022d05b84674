"""The data-parallel pieces that need no second process (issue 8): `trainer apply
--nproc` execs torchrun with the same options; world size 1 without torchrun's
environment (no process group, collectives pass values through); per-rank RNG files."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.distributed as dist

from trainer import cli
from trainer.checkpoint import rng
from trainer.checkpoint.layout import CheckpointError
from trainer.checkpoint.state import state_from_json
from trainer.train import commands, distributed
from trainer.train.checkpointing import identity_hash, run_identity


class _ExecError(Exception):
    pass


def test_nproc_execs_torchrun_with_the_same_options(monkeypatch):
    for name in distributed.TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    seen = {}

    def execvp(file, argv):
        seen["file"], seen["argv"] = file, argv
        raise _ExecError

    monkeypatch.setattr(commands.os, "execvp", execvp)
    with pytest.raises(_ExecError):
        cli.main(
            ["apply", "run.yaml", "--nproc", "2", "--out", "o", "--stop-after", "5", "--resume"]
        )
    assert seen["file"] == sys.executable
    assert seen["argv"] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "trainer",
        "apply",
        "run.yaml",
        "--stop-after",
        "5",
        "--out",
        "o",
        "--device",
        "auto",
        "--resume",
        "latest",
    ]


def test_nproc_refused_below_one_and_inside_torchrun(monkeypatch, capsys):
    assert cli.main(["apply", "run.yaml", "--nproc", "0"]) == 1
    assert "--nproc must be >= 1, got 0" in capsys.readouterr().err
    for name, value in zip(
        distributed.TORCHRUN_VARS, ("0", "2", "0", "localhost", "29500"), strict=True
    ):
        monkeypatch.setenv(name, value)
    assert cli.main(["apply", "run.yaml", "--nproc", "2"]) == 1
    assert "inside a torchrun launch" in capsys.readouterr().err


def test_world_size_one_without_torchrun_has_no_process_group(monkeypatch):
    for name in distributed.TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    with distributed.process_group(torch.device("cpu")) as world:
        assert world == distributed.SINGLE and not world.distributed and world.is_main
        assert not dist.is_initialized()
        assert distributed.current_world() == distributed.SINGLE
        assert distributed.sum_int(7, world) == 7
        assert distributed.sum_float(0.1, world) == 0.1
        assert distributed.any_rank(True, world) and not distributed.any_rank(False, world)
        assert distributed.gather_json({"a": 1}, world) == [{"a": 1}]
        model = torch.nn.Linear(2, 2)
        assert distributed.wrap_data_parallel(model, world, torch.device("cpu")) is model
        assert distributed.defer_sync(model) is None
    assert distributed.env_world_size() == 1


def test_each_ranks_rng_state_comes_back_to_that_rank():
    ranks = [
        ({"torch.cpu": torch.full((4,), r, dtype=torch.uint8)}, {"python": r, "numpy": -r})
        for r in range(3)
    ]
    tensors, states = rng.merge_ranks(ranks)
    assert sorted(tensors) == ["rank.1.torch.cpu", "rank.2.torch.cpu", "torch.cpu"]
    for r, (want_tensors, want_states) in enumerate(ranks):
        got_tensors, got_states = rng.rank_rng(tensors, states, rank=r)
        assert got_tensors.keys() == want_tensors.keys() and got_states == want_states
        assert torch.equal(got_tensors["torch.cpu"], want_tensors["torch.cpu"])
    one_rank = rng.merge_ranks(ranks[:1])
    assert one_rank == ranks[0], "a one-process checkpoint's RNG files changed format"
    with pytest.raises(CheckpointError, match="no RNG state of rank 3"):
        rng.rank_rng(tensors, states, rank=3)


def test_a_checkpoint_without_world_size_is_a_one_process_one():
    fields = {
        "step": 1,
        "epoch": 0,
        "epoch_step": 1,
        "scheduler_step": 1,
        "config_hash": "x",
        "data_manifest_sha256": None,
    }
    assert state_from_json(fields).world_size == 1
    assert state_from_json(dict(fields, world_size=2)).world_size == 2


def test_the_strategy_is_no_part_of_a_runs_identity():
    """A ddp checkpoint resumes under fsdp and back (one file format), and configs
    written before training.data_parallel existed keep their config hash."""
    from tests.unit.trainer.loop_support import loop_config  # noqa: PLC0415

    def with_training(**training):
        return identity_hash({"training": {"epochs": 1, **training}})

    ddp, fsdp = with_training(data_parallel="ddp"), with_training(data_parallel="fsdp")
    assert ddp == fsdp == with_training()
    assert ddp != with_training(epochs=2, data_parallel="ddp")
    fsdp_run = loop_config({"training.data_parallel": "fsdp"})
    assert run_identity(loop_config()) == run_identity(fsdp_run)
    with pytest.raises(ValueError, match="data_parallel must be one of ddp, fsdp"):
        distributed.check_strategy("zero3")
