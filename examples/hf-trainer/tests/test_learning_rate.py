"""FALSIFY-HF-TRAINER-002 (contracts/hf-trainer-loop-v1.yaml, INV-HF-TRAINER-002 after
INV-TRAIN-LOOP-007): the scheduled learning rate is on every parameter group before every
optimizer step. Run: ``pytest tests/test_learning_rate.py``."""

import hf_example
import pytest


@pytest.mark.ship_blocking
def test_the_scheduled_lr_is_on_every_param_group_before_every_optimizer_step():
    peak, warmup, steps = 1e-2, 3, 12
    recorder, expected = hf_example.lr_trace(steps, warmup, peak)
    # Trainer's two groups (weight decay and none) are both present and both hold parameters
    assert all(len(groups) == 2 for groups in recorder.lrs)
    assert expected[warmup] == peak and expected[0] == 0.0  # the schedule is not flat
    assert hf_example.lr_mismatches(recorder, expected) == []
