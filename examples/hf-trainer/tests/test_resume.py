"""FALSIFY-HF-TRAINER-004 (contracts/hf-trainer-loop-v1.yaml, INV-HF-TRAINER-004 after
INV-TRAIN-LOOP-012): a fresh Trainer resumed from a checkpoint finishes bit-identical to the
run that was never interrupted. Run: ``pytest tests/test_resume.py``."""

import hf_example
import pytest


@pytest.mark.ship_blocking
def test_a_fresh_trainer_resumed_from_a_checkpoint_is_bit_identical_to_the_straight_run():
    # 8 steps of 3 per epoch; interrupted at an epoch boundary (3) and mid-epoch (4), with
    # dropout on and a shuffling sampler, so weights, AdamW moments, scheduler, data position
    # and RNG all have to come back.
    for r in hf_example.resume_compare(total_steps=8, stop_points=[3, 4]):
        assert r.parameter_values > 0 and r.log_values == 3 * 8
        assert (r.differing_parameter_values, r.differing_log_values) == (0, 0), r
