"""Measurements of GATE-TEAM-TRAINER-001 to -003 (contracts/team-trainer-v1.yaml): the
Trainer pack's token-mean measurements run against the Trainer that pyproject.toml's
factory builds. The verdict is the gate threshold's, never this module's."""

from __future__ import annotations

from gates.measure import GateContext, Measurement, measures

# torch and transformers load on demand only: each function imports the pack when it runs.


@measures("GATE-TEAM-TRAINER-001")
def token_mean_under_accumulation(ctx: GateContext) -> Measurement:
    import hf_trainer_pack  # noqa: PLC0415

    factory = hf_trainer_pack.load_factory(ctx.root)
    return hf_trainer_pack.token_mean_under_accumulation(ctx, factory)


@measures("GATE-TEAM-TRAINER-002")
def token_mean_over_short_windows(ctx: GateContext) -> Measurement:
    import hf_trainer_pack  # noqa: PLC0415

    factory = hf_trainer_pack.load_factory(ctx.root)
    return hf_trainer_pack.token_mean_over_short_windows(ctx, factory)


@measures("GATE-TEAM-TRAINER-003")
def token_mean_over_padding_free_windows(ctx: GateContext) -> Measurement:
    import hf_trainer_pack  # noqa: PLC0415

    factory = hf_trainer_pack.load_factory(ctx.root)
    return hf_trainer_pack.token_mean_over_padding_free_windows(ctx, factory)
