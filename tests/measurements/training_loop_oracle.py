"""Measurement of GATE-TRAIN-LOOP-017 (contracts/training-loop-v1.yaml): the grammar oracle.

Runs trainer/oracle for seeds 0, 1, 2 - the tiny Llama trained by the real loop and the
Kneser-Ney trigram, both scored by the oracle's independent scorer - and reports the worst
ratio of validation perplexities.
"""

from __future__ import annotations

from gates.measure import GateContext, Measurement, measures


@measures("GATE-TRAIN-LOOP-017")
def grammar_oracle_ratio(ctx: GateContext) -> Measurement:
    from trainer.oracle import run  # noqa: PLC0415 - torch is imported on demand only

    results = run.run_seeds(run.SEEDS)
    worst = max(r.ratio for r in results)
    return Measurement(
        values={
            "worst_val_ppl_ratio_to_kn_trigram": (worst, "ratio"),
            **{f"val_ppl_ratio_seed_{r.seed}": (r.ratio, "ratio") for r in results},
            **{f"model_val_ppl_seed_{r.seed}": (r.model_ppl, "perplexity") for r in results},
            "kn_trigram_val_ppl": (results[0].kn_ppl, "perplexity"),
        },
        workload=(
            "verb-grammar corpus (480 training / 120 held-out forms), byte-level BPE V=300, "
            f"tiny Llama (2 layers, hidden 64) trained {run.ORACLE_STEPS} steps by "
            "trainer.train.loop.train on CPU for seeds 0, 1, 2; interpolated Kneser-Ney "
            "trigram (D=0.75); both scored prefix-only by trainer/oracle/scorer.py"
        ),
        inputs=[
            ctx.root / p
            for p in (
                "trainer/oracle/verbs.py",
                "trainer/oracle/ngram.py",
                "trainer/oracle/scorer.py",
                "trainer/oracle/run.py",
                "trainer/train/loop.py",
            )
        ],
        parameters={
            "steps": run.ORACLE_STEPS,
            "lr": run.ORACLE_LR,
            "warmup_steps": run.ORACLE_WARMUP,
            "seeds": list(run.SEEDS),
        },
        notes="; ".join(f"seed {r.seed}: ratio {r.ratio:.3f}" for r in results),
    )
