"""A stop alert under torchrun (2 ranks, gloo on CPU): every rank stops after the same
step even when the rule fired on one rank alone, so no rank waits forever in a collective
the others left; rank 0 names the rank, step and value and saves that step's checkpoint.

The ranks' configs differ here on purpose (a real run has one config, and loss, grad
norm, lr and val loss are the same on every rank; step times are not): rank 1's rule
fires from step 4, rank 0's never. Without the agreement rank 1 returns and rank 0 blocks
in the next step's collective until the 60 s timeout, and the launch fails.
"""

from __future__ import annotations

import pytest

from tests.unit.trainer.distributed_support import run_child
from trainer.checkpoint.layout import checkpoint_dirs, step_of
from trainer.checkpoint.verify import inspect_checkpoint

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def test_a_stop_alert_on_one_rank_stops_every_rank_after_that_step(tmp_path):
    spec = {
        "data.micro_batch": 2,
        "training.gradient_accumulation": 2,
        "training.max_steps": 12,
        "training.save_interval": 1000,
        "checkpoints": True,
        "alerts_by_rank": {
            "0": [{"when": "loss > 1.0e9", "action": "stop"}],
            "1": [{"when": "loss > 0", "action": "stop", "after_step": 4}],
        },
    }
    out = tmp_path / "run"
    result = run_child(out, spec, nproc=2)
    assert (result["stop_reason"], result["steps_run"]) == ("alert", 4)
    alert = result["alert"]
    assert (alert["step"], alert["rank"], alert["index"]) == (4, 1, 0)
    assert alert["value"] == result["losses"][3], "rank 1's loss is the global loss"
    assert len(result["losses"]) == 4 and result["checkpoints"] == [4]
    (saved,) = checkpoint_dirs(out / "checkpoints")
    assert step_of(saved) == 4 and inspect_checkpoint(saved).valid
