"""FALSIFY-HF-TRAINER-001 (contracts/hf-trainer-loop-v1.yaml, INV-HF-TRAINER-001 after
INV-TRAIN-LOOP-009): under gradient accumulation, Trainer's step is the token mean over the
whole global batch. Run: ``pytest tests/test_accumulation.py``."""

import hf_example
import pytest


@pytest.mark.ship_blocking
def test_accumulated_micro_batches_give_the_token_mean_gradient_of_the_whole_batch():
    # 6 sequences of 1 to 15 targets, split 2 x 3, 3 x 2 and 6 x 1: every split's
    # micro-batches hold unequal target counts, where a per-micro-batch mean goes wrong.
    for micro_batch, grad_accum in [(3, 2), (2, 3), (1, 6)]:
        r = hf_example.accumulation(micro_batch, grad_accum, sequences=6)
        assert len(set(r.micro_batch_targets)) == grad_accum, r.micro_batch_targets
        assert r.grad_tensors == 21  # every parameter tensor of the tiny Llama got a gradient
        split = f"{grad_accum} micro-batches of {micro_batch} ({r.micro_batch_targets} targets)"
        assert r.max_grad_relative_error <= 1e-6, (
            f"{split}: gradient {r.max_grad_relative_error:.3g}"
        )
        assert r.loss_relative_error <= 1e-6, f"{split}: loss {r.loss_relative_error:.3g}"
