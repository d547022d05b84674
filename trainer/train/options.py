"""How this process runs a run config: everything about a run that is not its definition.

    result = train(cfg, train_data, val_data, options=RunOptions(out_dir=Path("runs/a"),
                                                                  checkpoint=True))

The run's definition - seed, batch, schedule, precision, evaluation, checkpoint cadence,
alerts, the model - is the RunConfig (trainer/config/sections.py), read by the loop from its
sections and nowhere else. RunOptions says where and how far this process takes it: the
device, the run directory (or none), whether to checkpoint, an early stop that keeps the
configured schedule, a resume. `trainer apply` builds them from its flags
(trainer/train/apply.py); run_manifest.json records them as the config's ``apply`` block
(``record``), which the resume identity leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config.sections import RunConfig
from trainer.runfiles.names import RunDir


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """Where and how far this process runs a config; the defaults write nothing."""

    device: str = "cpu"  # cpu | cuda | auto (CUDA when torch sees one)
    # The run directory: run_manifest.json, metrics.jsonl, runs.db, checkpoints/.
    # None: write nothing - no manifest, metrics or checkpoints.
    out_dir: Path | None = None
    # Save checkpoints into out_dir/checkpoints: every training.save_interval steps, the
    # last step, and on SIGTERM/SIGINT (handled only then). Needs out_dir.
    checkpoint: bool = False
    # Stop after this step (`trainer apply --stop-after`); the LR schedule keeps the
    # config's training.max_steps, so a later resume continues the same run. None: run
    # to max_steps.
    stop_after: int | None = None
    # "latest" (the newest valid checkpoint in out_dir/checkpoints) or a checkpoint
    # directory; the run continues at the step after it. Needs out_dir.
    resume_from: str | Path | None = None
    resume_override: bool = False  # resume a checkpoint of another config or data set
    compile: bool = False  # torch.compile the model (also on when training.compile is)

    def __post_init__(self) -> None:
        if self.stop_after is not None and self.stop_after < 1:
            raise ValueError(f"stop_after must be >= 1 (or None), got {self.stop_after}")
        if self.out_dir is None and self.checkpoint:
            raise ValueError("checkpoint needs out_dir: checkpoints go to out_dir/checkpoints")
        if self.out_dir is None and self.resume_from is not None:
            raise ValueError(
                "resume_from needs out_dir: the run directory whose checkpoints/ it resumes"
            )

    @property
    def checkpoint_dir(self) -> Path | None:
        """Where this run's checkpoints are (None without a run directory)."""
        return None if self.out_dir is None else RunDir(Path(self.out_dir)).checkpoints

    def last_step(self, config: RunConfig) -> int:
        """The step this run stops after: training.max_steps, or stop_after before it.
        ValueError when stop_after is past the end of the LR schedule."""
        max_steps = config.training.max_steps
        if self.stop_after is None:
            return max_steps
        if self.stop_after > max_steps:
            raise ValueError(
                f"stop_after {self.stop_after} is past training.max_steps {max_steps}, the "
                "end of the LR schedule"
            )
        return self.stop_after

    def record(self, config: RunConfig) -> dict[str, Any]:
        """run_manifest.json's ``config.apply`` block: how this process ran the run (the
        name is `trainer apply`'s, whose flags these are). No part of the resume identity."""
        return {
            "stop_after": self.stop_after,
            "out": None if self.out_dir is None else str(self.out_dir),
            "device": self.device,
            "compile": self.compile or config.training.compile,
            "resume": None if self.resume_from is None else str(self.resume_from),
        }
