"""FLOP accounting for the loop's metrics: model FLOPs per token (6 N + 12 L H T, PaLM
appendix B) and the device's datasheet peak, whose ratio to the achieved rate is a CUDA
record's MFU. The formulas live in trainer/plan/flops.py (layer 5, below train, so that
`trainer plan` estimates with the same ones) and are re-exported here; a CPU's measured
matmul peak is trainer/plan/roofline.py's.
"""

from __future__ import annotations

from trainer.plan.flops import (  # noqa: F401 - re-exported
    PEAK_BF16_FLOPS,
    flops_per_token,
    matmul_params,
    peak_flops,
)
