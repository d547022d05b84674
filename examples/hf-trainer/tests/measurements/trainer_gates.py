"""Measurements of GATE-HF-TRAINER-001 .. 004 (contracts/hf-trainer-loop-v1.yaml): the
Trainer pack's measurements (hf_trainer_pack.py) of the stock ``transformers.Trainer``.

Each runs the installed Trainer through a larger version of its bound test's scenario
(hf_example.py) and reports what it measured, whatever that is: the verdict is the
threshold's, never this module's. Run by ``gates check GATE-HF-TRAINER-00N`` or
``gates promote`` from examples/hf-trainer.
"""

from __future__ import annotations

from gates.measure import GateContext, Measurement, measures

# torch and transformers load on demand only: each function imports the pack when it runs.


@measures("GATE-HF-TRAINER-001")
def token_mean_under_accumulation(ctx: GateContext) -> Measurement:
    import hf_trainer_pack  # noqa: PLC0415

    return hf_trainer_pack.token_mean_under_accumulation(ctx)


@measures("GATE-HF-TRAINER-002")
def scheduled_lr_applied(ctx: GateContext) -> Measurement:
    import hf_trainer_pack  # noqa: PLC0415

    return hf_trainer_pack.scheduled_lr_applied(ctx)


@measures("GATE-HF-TRAINER-003")
def grad_norm_before_clipping(ctx: GateContext) -> Measurement:
    import hf_trainer_pack  # noqa: PLC0415

    return hf_trainer_pack.grad_norm_before_clipping(ctx)


@measures("GATE-HF-TRAINER-004")
def bitwise_resume(ctx: GateContext) -> Measurement:
    import hf_trainer_pack  # noqa: PLC0415

    return hf_trainer_pack.bitwise_resume(ctx)
