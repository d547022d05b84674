"""A disk that fills up under `trainer apply` and `trainer pipeline` (issue 20): the final
checkpoint cannot be written, so the command exits 6 (SAVE_FAILED) with a clear message
and no traceback, says so in training_state.json and the run store, exports nothing, and
loses nothing written before (earlier checkpoints, metrics, the stages before training).
Issue 31: `trainer export`, `trainer data encode` and `trainer runs sync` under the same
fault exit 1 with a message naming the file, no traceback, and nothing half-written (no
export or data directory, no partial shard or store a later command would take as whole).

The fault is real and needs no root: the child runs under RLIMIT_FSIZE with SIGXFSZ
ignored, so any write past the limit fails with EFBIG ("File too large"). The limit sits
between the run's small files (metrics, state, the run store, shards, tokenizer) and a
checkpoint's weights, which is asserted, not assumed.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.acceptance.test_trainer_pipeline import pipeline_argv, tiny_config
from tests.tree import files_under
from tests.unit.trainer.checkpoint_support import save, trained
from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    encode_test_corpus,
    one_thread,
    write_run_config,
)
from tests.unit.trainer.store_support import tables, write_run
from tests.unit.trainer.test_checkpoint_final_save import run_end
from trainer import cli, exit_codes
from trainer.checkpoint.layout import checkpoint_dirs, step_of
from trainer.checkpoint.verify import inspect_checkpoint

pytestmark = pytest.mark.slow  # training and the pipeline in subprocesses: about 6 s

ROOT = Path(__file__).resolve().parents[2]
STDLIB = Path(sysconfig.get_paths()["stdlib"])
LIMIT = 100_000  # bytes per file: the runs' small files fit, a checkpoint's weights do not


def _trainer(*argv: str, limit: int | None = LIMIT) -> subprocess.CompletedProcess:
    """`python -m trainer ARGV` whose writes past ``limit`` bytes a file fail with EFBIG
    (in the child: SIGXFSZ ignored, so the write fails instead of killing it); None: no
    limit."""

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "trainer", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        preexec_fn=None if limit is None else limited,
        check=False,
        timeout=300,
    )


def _failed_cleanly(proc: subprocess.CompletedProcess, command: str, file: Path) -> None:
    """Exit 1, one `trainer COMMAND: error:` line naming ``file`` and the fault, no trace."""
    assert proc.returncode == exit_codes.FINDINGS, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = next((x for x in proc.stderr.splitlines() if x.startswith(f"trainer {command}:")), "")
    assert "error:" in line and str(file) in line, proc.stderr[-3000:]
    assert "File too large" in line or "file-size limit" in line, line


def _steps(run_dir: Path) -> list[int]:
    return [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _small_files_fit(run_dir: Path) -> None:
    """The test's premise: every file but a checkpoint's fits under the limit."""
    for path in run_dir.rglob("*"):
        if path.is_file() and "checkpoints" not in path.parts:
            assert path.stat().st_size < LIMIT // 2, f"{path} would hit the size limit itself"


def test_apply_on_a_full_disk_exits_save_failed_and_keeps_every_earlier_checkpoint(
    tmp_path, capsys
):
    data, tok = encode_test_corpus(tmp_path)
    config = write_run_config(
        tmp_path / "run.yaml", data, tok, tmp_path / "unused",
        max_steps=8, save_interval=2, warmup_steps=0,
    )  # fmt: skip
    out = tmp_path / "out"
    args = ["apply", str(config), "--out", str(out), "--device", "cpu"]
    assert cli.main([*args, "--stop-after", "4"]) == 0, capsys.readouterr().err
    weights = out / "checkpoints" / "step-00000004" / "model.safetensors"
    assert weights.stat().st_size > LIMIT, "the checkpoint fits under the limit: no fault"
    before = {
        p.name: (p / "manifest.json").read_bytes() for p in checkpoint_dirs(out / "checkpoints")
    }

    proc = _trainer(*args, "--resume")
    assert proc.returncode == exit_codes.SAVE_FAILED == 6, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "trainer apply: error: the final checkpoint of step 8 was not written" in proc.stderr
    assert "File too large" in proc.stderr, proc.stderr[-3000:]
    status, reason, stored = run_end(out)
    assert (status, stored) == ("save_failed", "save_failed")
    assert "File too large" in reason and "last good checkpoint is step 4" in reason, reason
    # Nothing earlier is lost: the checkpoints verify as they were, latest names one.
    assert sorted(step_of(p) for p in checkpoint_dirs(out / "checkpoints")) == [2, 4]
    for path in checkpoint_dirs(out / "checkpoints"):
        assert inspect_checkpoint(path).valid
        assert (path / "manifest.json").read_bytes() == before[path.name]
    assert (out / "checkpoints" / "latest").read_text().strip() == "step-00000004"
    assert _steps(out) == list(range(1, 9))
    _small_files_fit(out)

    # Space again: the same run resumes from its last good checkpoint and finishes.
    capsys.readouterr()
    assert cli.main([*args, "--resume"]) == 0, capsys.readouterr().err
    assert run_end(out)[0::2] == ("finished", "finished")
    assert inspect_checkpoint(out / "checkpoints" / "step-00000008").valid


def test_pipeline_on_a_full_disk_exits_save_failed_and_exports_nothing(tmp_path):
    corpus = tmp_path / "corpus"
    for source in sorted((STDLIB / "json").rglob("*.py")):  # ~20k tokens: small shards
        target = corpus / source.relative_to(STDLIB / "json")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    config = tiny_config(tmp_path / "tiny.yaml", max_steps=6, save_interval=3)
    out = tmp_path / "run"

    proc = _trainer(*pipeline_argv(config, out, corpus))
    assert proc.returncode == exit_codes.SAVE_FAILED, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    said = "trainer pipeline: error: stage train: the final checkpoint of step 6 was not written"
    assert said in proc.stderr, proc.stderr[-3000:]
    assert "File too large" in proc.stderr and "nothing is exported" in proc.stderr
    # Refused: no stage after training ran, and no summary claims it finished.
    for later in ("export", "baseline.json", "plots", "summary.json"):
        assert not (out / later).exists(), f"{later} was made from a run that did not save"
    stages = json.loads((out / "pipeline.json").read_text())["stages"]
    assert stages["train"]["status"] == "started" and "export" not in stages, stages
    # Nothing earlier is lost: the tokenizer and the shards, the run's metrics and state.
    assert (out / "tokenizer" / "tokenizer.json").is_file()
    assert (out / "data" / "manifest.json").is_file()
    train = out / "train"
    assert _steps(train) == list(range(1, 7))
    assert run_end(train)[0::2] == ("save_failed", "save_failed")
    assert not checkpoint_dirs(train / "checkpoints")
    _small_files_fit(out)


# ---------------------------------------------------------------- issue 31: more writers


def test_export_on_a_full_disk_names_the_file_and_leaves_no_export(tmp_path):
    model, optimizer = trained(steps=1)
    ckpt = save(tmp_path / "run", 3, model, optimizer)
    assert (ckpt / "model.safetensors").stat().st_size > LIMIT, "the export fits: no fault"
    before = files_under(tmp_path)
    out = tmp_path / "release"
    proc = _trainer("export", str(ckpt), "--out", str(out))
    _failed_cleanly(proc, "export", out / "model.safetensors")
    assert files_under(tmp_path) == before, "no export, no staging directory, checkpoint as it was"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    done = _trainer("export", str(ckpt), "--out", str(out), limit=None)
    assert done.returncode == 0, done.stderr[-2000:]  # two-sided: with room, it exports
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize(
    ("shard_tokens", "limit", "fails"),
    [(1 << 23, 2_000, "train-00000.bin"), (64, 1_000, "manifest.json")],
    ids=["a-shard", "the-manifest"],
)
def test_data_encode_on_a_full_disk_names_the_file_and_leaves_no_data_dir(
    tmp_path, shard_tokens, limit, fails
):
    """The shard (its 4 KB past the limit) or, with shards of 64 tokens that fit, the
    manifest listing them all: either way no data directory and no temp directory is
    left, so nothing later takes a half-encoded corpus for one."""
    _, tok = encode_test_corpus(tmp_path / "corpus")
    inputs = tmp_path / "corpus" / "corpus"
    out = tmp_path / "data"
    before = files_under(tmp_path)
    argv = ["data", "encode", "--tokenizer", str(tok), "--input", str(inputs), "--out", str(out)]
    argv += ["--shard-tokens", str(shard_tokens), "--workers", "1"]
    proc = _trainer(*argv, limit=limit)
    _failed_cleanly(proc, "data encode", out / fails)
    assert files_under(tmp_path) == before, "nothing written"
    assert not any(p.name.startswith("data") for p in tmp_path.iterdir())
    done = _trainer(*argv, limit=None)
    assert done.returncode == 0, done.stderr[-2000:]  # two-sided: with room, it encodes
    assert (out / "manifest.json").is_file()
    assert (out / fails).stat().st_size > limit, "the file the fault hit outgrows the limit"


def test_runs_sync_on_a_full_disk_leaves_no_store_and_keeps_an_old_one(tmp_path, monkeypatch):
    """A new store a failed sync began is removed (not left empty, for `runs show` to call
    a run with no steps); an existing one keeps every row (SQLite rolls the write back)."""
    monkeypatch.setenv("SHIPGATE_HOME", str(tmp_path / "home"))
    run = write_run(tmp_path / "run", 2000, max_steps=2000)  # its store: about 230 KB
    limit = 60_000
    assert (run / "metrics.jsonl").stat().st_size > limit  # read, never written: no matter
    proc = _trainer("runs", "sync", str(run), limit=limit)
    _failed_cleanly(proc, "runs sync", run / "runs.db")
    assert not [p.name for p in run.iterdir() if p.name.startswith("runs.db")]
    done = _trainer("runs", "sync", str(run), limit=None)
    assert done.returncode == 0, done.stderr[-2000:]  # two-sided: with room, it syncs
    stored = tables(run / "runs.db")
    assert (run / "runs.db").stat().st_size > limit and len(stored["metrics"]) == 2000
    proc = _trainer("runs", "sync", str(run), limit=limit)
    _failed_cleanly(proc, "runs sync", run / "runs.db")
    # Row for row (its header's change counter moves: SQLite opened it to write).
    assert tables(run / "runs.db") == stored, "the store that was there is kept"
