"""A resumed training run in a new process, for the resume property (FALSIFY-TRAIN-LOOP-012).

    python -m tests.unit.trainer.checkpoint_child SPEC.json OUT_DIR

SPEC: {"max_steps", "save_interval", "run_dir", "resume", "epochs"} (resume_support._Spec).
Applies $SHIPGATE_MUTANT as the pytest plugin does, so a mutant under audit reaches the
resumed run too; trains with resume_support.run_spec and writes OUT_DIR/result.json
(steps and losses as exact hex floats) and OUT_DIR/final.safetensors (weights and every
AdamW state tensor by parameter name).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gates import mutants

ROOT = Path(__file__).resolve().parents[3]


def main(spec_path: str, out_dir: str) -> None:
    import torch  # noqa: PLC0415

    from tests.unit.trainer.resume_support import run_and_record  # noqa: PLC0415

    torch.set_num_threads(1)  # as the parent test (loop_support.one_thread): same kernels

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    run_and_record(spec, Path(out_dir))


if __name__ == "__main__":
    mutants.apply_from_env(ROOT)
    main(sys.argv[1], sys.argv[2])
