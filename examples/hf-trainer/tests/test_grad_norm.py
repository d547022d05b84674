"""FALSIFY-HF-TRAINER-003 (contracts/hf-trainer-loop-v1.yaml, INV-HF-TRAINER-003 after
INV-TRAIN-LOOP-008): the grad_norm Trainer logs is the global norm before clipping, and
clipping scales by it. Run: ``pytest tests/test_grad_norm.py``."""

import hf_example


def test_the_logged_grad_norm_is_the_pre_clip_norm_and_clipping_uses_it():
    clip = 0.5  # below every pre-clip norm of this run (1.1 .. 2.8), so clipping engages
    trace = hf_example.grad_norm_trace(steps=10, clip=clip)
    assert len(trace) == 10
    assert len({s.logged for s in trace}) > 1  # not a constant
    for s in trace:
        assert abs(s.logged - s.pre_clip) <= 1e-6 * s.pre_clip, s
        assert s.pre_clip > clip, s  # the scenario clips at every step
        assert s.post_clip <= clip * (1 + 1e-6), s
        assert s.clip_relative_error <= 1e-6, s
