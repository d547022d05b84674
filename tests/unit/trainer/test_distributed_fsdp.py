"""The ``fsdp`` strategy on CPU with torchrun + gloo (FSDP2 fully_shard): two sharded
ranks are one process with the whole global batch (and two ddp ranks), a two-rank run
resumes bit for bit, its checkpoint is a single-process checkpoint, and a ddp checkpoint
resumes under fsdp.

Tolerance: as in test_distributed_ddp.py - two ranks sum gradients in another order than
one process, so losses and grad norms agree to rtol 1e-5 and final weights to rtol 1e-5,
atol 1e-6, not bitwise. The resume is bitwise.

One torchrun launch takes all four two-rank runs, one after the other in one process
group (distributed_child's "runs"): each launch costs seconds of start-up on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.unit.trainer.distributed_support import run_child, run_here
from tests.unit.trainer.loop_support import tiny_config
from trainer.checkpoint.layout import (
    CHECKPOINT_STATE_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    step_dir_name,
)
from trainer.checkpoint.load import load_checkpoint
from trainer.checkpoint.verify import inspect_checkpoint
from trainer.model.llama import build_model
from trainer.train import optim

pytestmark = [pytest.mark.distributed, pytest.mark.slow]

STEPS, HALF = 6, 3
# One global batch = 8 sequences: two ranks x micro-batch 2 x 2 accumulation steps, or one
# process x micro-batch 4 x 2. Checkpoints after steps 3 and 6.
TWO_RANKS = {
    "data.micro_batch": 2,
    "training.gradient_accumulation": 2,
    "training.max_steps": STEPS,
    "training.save_interval": HALF,
    "checkpoints": True,
}
FSDP = TWO_RANKS | {"training.data_parallel": "fsdp"}
ONE_PROCESS = TWO_RANKS | {"data.micro_batch": 4}


def _half(out: Path, name: str) -> str:
    return str(out / name / "checkpoints" / step_dir_name(HALF))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    out = tmp_path_factory.mktemp("fsdp")
    spec = {
        "runs": {
            "fsdp": FSDP,
            "resumed": dict(FSDP, resume_from=_half(out, "fsdp")),
            "ddp": TWO_RANKS | {"training.data_parallel": "ddp"},
            "ddp_then_fsdp": dict(FSDP, resume_from=_half(out, "ddp")),
        }
    }
    results = run_child(out, spec, nproc=2)
    results["one"] = run_here(out / "one", ONE_PROCESS)  # in this process: no second launch
    return out, results


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "weights.safetensors"))


def _close(mine: dict, reference: dict, *, steps: slice = slice(None)) -> None:
    for key in ("losses", "grad_norms"):
        torch.testing.assert_close(
            torch.tensor(mine[key]), torch.tensor(reference[key][steps]), rtol=1e-5, atol=0.0
        )


def _weights_close(mine: dict, reference: dict) -> None:
    assert mine.keys() == reference.keys()
    for name, expected in reference.items():
        torch.testing.assert_close(mine[name], expected, rtol=1e-5, atol=1e-6)


def test_two_fsdp_ranks_equal_one_process_and_two_ddp_ranks(runs):
    out, r = runs
    assert len(r["fsdp"]["losses"]) == len(r["one"]["losses"]) == STEPS
    _close(r["fsdp"], r["one"])
    _close(r["fsdp"], r["ddp"])
    _weights_close(_weights(out / "fsdp"), _weights(out / "one"))
    _weights_close(_weights(out / "fsdp"), _weights(out / "ddp"))


def test_two_rank_fsdp_resume_is_bit_identical(runs):
    out, r = runs
    assert r["fsdp"]["checkpoints"] == [HALF, STEPS]
    assert r["resumed"]["resumed_from"] == HALF
    assert [x.hex() for x in r["resumed"]["losses"]] == [
        x.hex() for x in r["fsdp"]["losses"][HALF:]
    ]
    assert [x.hex() for x in r["resumed"]["grad_norms"]] == [
        x.hex() for x in r["fsdp"]["grad_norms"][HALF:]
    ]
    mine, reference = _weights(out / "resumed"), _weights(out / "fsdp")
    assert all(torch.equal(mine[k], reference[k]) for k in reference), "weights differ"


def test_fsdp_checkpoint_is_a_single_process_checkpoint(runs):
    out, _ = runs
    sharded = out / "fsdp" / "checkpoints" / step_dir_name(STEPS)
    single = out / "one" / "checkpoints" / step_dir_name(STEPS)
    assert inspect_checkpoint(sharded).problems == []
    for name in (MODEL_FILE, OPTIMIZER_FILE):
        mine, reference = load_file(str(sharded / name)), load_file(str(single / name))
        assert {k: (v.shape, v.dtype) for k, v in mine.items()} == {
            k: (v.shape, v.dtype) for k, v in reference.items()
        }, name
    mine, reference = (
        json.loads((d / CHECKPOINT_STATE_FILE).read_text()) for d in (sharded, single)
    )
    assert mine["optimizer_groups"] == reference["optimizer_groups"]
    # Loaded by one process, as `trainer export` / a one-process resume would read it.
    model = build_model(tiny_config(), device=torch.device("cpu"), seed=0)
    optimizer = optim.build_adamw(model, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    state = load_checkpoint(sharded, model, optimizer, restore_random=False)
    assert (state.step, state.world_size) == (STEPS, 2)
    final = _weights(out / "fsdp")
    assert all(torch.equal(t, final[k]) for k, t in model.state_dict().items())
    moments = load_file(str(sharded / OPTIMIZER_FILE))
    names = {id(p): n for n, p in model.named_parameters()}
    for p, entry in optimizer.state.items():
        assert torch.equal(entry["exp_avg_sq"], moments[f"{names[id(p)]}.exp_avg_sq"])


def test_a_ddp_checkpoint_resumes_under_fsdp(runs):
    out, r = runs
    resumed, ddp = r["ddp_then_fsdp"], r["ddp"]
    assert resumed["resumed_from"] == HALF
    # The checkpoint's weights are loaded exactly: the first step's loss (a forward of
    # the same weights on the same rank slices) is ddp's bit for bit.
    assert resumed["losses"][0].hex() == ddp["losses"][HALF].hex()
    _close(resumed, ddp, steps=slice(HALF, None))
    _weights_close(_weights(out / "ddp_then_fsdp"), _weights(out / "ddp"))
