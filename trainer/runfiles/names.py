"""The names of a run directory's files: the one place that knows them.

    run = RunDir(Path("runs/demo/train"))       # `trainer apply --out DIR`
    run.metrics, run.training_state, run.manifest, run.store, run.checkpoints
    job = PipelineDir(Path("runs/demo"))        # `trainer pipeline --out RUN`
    job.state, job.run_config, job.train.metrics, job.summary

A training run's directory (``trainer apply --out``; a pipeline's ``train/``):

- ``run_manifest.json`` (RUN_MANIFEST_FILE): what the run is, written before step 1
  (trainer/train/manifest.py), atomically (json_file.atomic_write_json).
- ``metrics.jsonl`` (METRICS_FILE): one line per step, appended and flushed
  (metrics_file.MetricsLog); rewound on resume (metrics_file.rewind_metrics).
- ``training_state.json`` (TRAINING_STATE_FILE): the latest record and how the run ended,
  replaced atomically every step (training_state.py).
- ``runs.db`` (RUNS_DB_FILE): the run store, derived from the files above (trainer/store).
- ``checkpoints/`` (CHECKPOINTS_DIR): ``step-NNNNNNNN/`` checkpoints and the ``latest``
  pointer, a format of their own (trainer/checkpoint/layout.py; its state file is
  CHECKPOINT_STATE_FILE, ``state.json``).
- ``export/`` (EXPORT_DIR): an export kept with the run, hashed by `trainer runs sync`;
  ``plots/`` (PLOTS_DIR): where `trainer plot RUN_DIR` draws by default.
- ``.writer.lock`` (WRITER_LOCK_FILE): the advisory lock of whoever writes the directory
  (lock.py), here and in a pipeline's run directory.

A pipeline's run directory (``trainer pipeline --out``) holds ``pipeline.json``
(PIPELINE_STATE_FILE: each stage's key and outputs, trainer/pipeline/state.py), the run
config it trains (``run.yaml``), ``tokenizer/``, ``data/``, the training run's directory
``train/``, ``export/``, ``baseline.json``, ``plots/``, ``evidence/``, ``report.html`` and
``summary.json``. Every JSON file is written whole and atomically; none is ever edited in
place.

The names on disk are a format: runs written by earlier versions are read by this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# ------------------------------------------------------------------ a training run
RUN_MANIFEST_FILE = "run_manifest.json"
METRICS_FILE = "metrics.jsonl"
TRAINING_STATE_FILE = "training_state.json"
RUNS_DB_FILE = "runs.db"
CHECKPOINTS_DIR = "checkpoints"
EXPORT_DIR = "export"
PLOTS_DIR = "plots"
#: The writer lock of a run directory, training run's and pipeline's alike (lock.py).
WRITER_LOCK_FILE = ".writer.lock"

# ------------------------------------------------------------------ a pipeline run
PIPELINE_STATE_FILE = "pipeline.json"
RUN_CONFIG_FILE = "run.yaml"
TOKENIZER_DIR = "tokenizer"
DATA_DIR = "data"
TRAIN_DIR = "train"
BASELINE_FILE = "baseline.json"
EVIDENCE_DIR = "evidence"
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class RunDir:
    """The paths of a training run's directory (nothing is read or created)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def manifest(self) -> Path:
        return self.root / RUN_MANIFEST_FILE

    @property
    def metrics(self) -> Path:
        return self.root / METRICS_FILE

    @property
    def training_state(self) -> Path:
        return self.root / TRAINING_STATE_FILE

    @property
    def store(self) -> Path:
        return self.root / RUNS_DB_FILE

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS_DIR

    @property
    def export(self) -> Path:
        return self.root / EXPORT_DIR

    @property
    def plots(self) -> Path:
        return self.root / PLOTS_DIR


@dataclass(frozen=True)
class PipelineDir:
    """The paths of a pipeline's run directory (nothing is read or created)."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def state(self) -> Path:
        return self.root / PIPELINE_STATE_FILE

    @property
    def run_config(self) -> Path:
        return self.root / RUN_CONFIG_FILE

    @property
    def tokenizer(self) -> Path:
        return self.root / TOKENIZER_DIR

    @property
    def data(self) -> Path:
        return self.root / DATA_DIR

    @property
    def train(self) -> RunDir:
        return RunDir(self.root / TRAIN_DIR)

    @property
    def export(self) -> Path:
        return self.root / EXPORT_DIR

    @property
    def baseline(self) -> Path:
        return self.root / BASELINE_FILE

    @property
    def plots(self) -> Path:
        return self.root / PLOTS_DIR

    @property
    def evidence(self) -> Path:
        return self.root / EVIDENCE_DIR

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    @property
    def summary(self) -> Path:
        return self.root / SUMMARY_FILE
