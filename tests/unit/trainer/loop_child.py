"""A training run in its own process, for the determinism test (FALSIFY-TRAIN-LOOP-011).

    python -m tests.unit.trainer.loop_child OUT.json

Applies $SHIPGATE_MUTANT exactly as the pytest plugin (gates/runner/pytest_plugin.py) does, so
a mutant under audit reaches both runs; then trains 30 steps of a tiny model (seed 1234,
an epoch boundary at step 16) and writes the losses and gradient norms as exact hex
floats and the sha256 of the final weights serialized as safetensors.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from safetensors.torch import save

from gates import mutants

ROOT = Path(__file__).resolve().parents[3]


def run() -> dict:
    from tests.unit.trainer.loop_support import (  # noqa: PLC0415
        TensorSequences,
        loop_config,
        random_rows,
    )
    from trainer.train.loop import train  # noqa: PLC0415

    data = TensorSequences(random_rows(32, 8, seed=11))  # 16 steps per epoch
    run = loop_config(
        {
            "training.seed": 1234,
            "training.max_steps": 30,
            "training.epochs": 2,
            "training.gradient_accumulation": 1,
        }
    )
    result = train(run, data, None)
    weights = {k: v.contiguous() for k, v in result.model.state_dict().items()}
    return {
        "losses": [float(x).hex() for x in result.losses],
        "grad_norms": [float(x).hex() for x in result.grad_norms],
        "weights_sha256": hashlib.sha256(save(weights)).hexdigest(),
    }


if __name__ == "__main__":
    mutants.apply_from_env(ROOT)
    Path(sys.argv[1]).write_text(json.dumps(run()), encoding="utf-8")
