"""`trainer inspect` and `trainer export` from the command line (in-process main(), and a
process of its own where another process must hold a run directory's writer lock)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tree import files_under
from tests.unit.trainer.checkpoint_support import save, trained
from trainer.checkpoint.verify import inspect_checkpoint
from trainer.cli import main
from trainer.runfiles.lock import writer_lock

ROOT = Path(__file__).resolve().parents[2]


def test_inspect_reports_a_valid_checkpoint_and_exits_1_on_a_flipped_byte(tmp_path, capsys):
    model, optimizer = trained(steps=1)
    ckpt = save(tmp_path, 7, model, optimizer)
    assert main(["inspect", str(ckpt), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True
    assert (report["format"], report["format_version"], report["step"]) == (
        "shipgate-checkpoint",
        3,
        7,
    )
    assert (report["tensor_count"], report["parameter_count"]) == (21, 158_016)
    assert report["architecture"]["hidden_size"] == 64
    assert [(f["name"], f["ok"]) for f in report["files"]] == [
        ("model.safetensors", True),
        ("optimizer.safetensors", True),
        ("rng.json", True),
        ("rng.safetensors", True),
        ("state.json", True),
    ]
    data = bytearray((ckpt / "optimizer.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (ckpt / "optimizer.safetensors").write_bytes(bytes(data))
    assert main(["inspect", str(ckpt)]) == 1
    captured = capsys.readouterr()
    assert "BAD optimizer.safetensors: sha256 differs from the manifest" in captured.out
    assert "INVALID" in captured.out and "optimizer.safetensors" in captured.err
    assert main(["inspect", str(tmp_path / "nothing")]) == 1


def test_export_writes_a_loadable_directory_and_refuses_an_invalid_checkpoint(tmp_path, capsys):
    model, optimizer = trained(steps=1)
    ckpt = save(tmp_path / "run", 3, model, optimizer)
    assert main(["export", str(ckpt), "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    assert "21 tensors" in capsys.readouterr().out
    (ckpt / "stray.pt").write_bytes(b"\x80\x04")
    assert main(["export", str(ckpt), "--out", str(tmp_path / "out2")]) == 1
    assert "stray.pt: unexpected file" in capsys.readouterr().err
    assert not (tmp_path / "out2").exists()


@pytest.fixture(scope="module")
def apply_run(tmp_path_factory) -> Path:
    """A run directory as `trainer apply` leaves it: run_manifest.json, and checkpoints/
    holding step-00000003 and the `latest` pointer."""
    run = tmp_path_factory.mktemp("apply") / "run"
    model, optimizer = trained(steps=1)
    save(run / "checkpoints", 3, model, optimizer)
    (run / "run_manifest.json").write_text("{}\n")
    return run


def _copy_run(apply_run: Path, tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(apply_run, run)
    return run, run / "checkpoints" / "step-00000003"


OUT_IN_CHECKPOINTS = {
    "inside-the-checkpoint": (
        lambda run, ckpt: ckpt / "hf",
        "is inside the checkpoint it exports",
    ),
    "the-checkpoint-itself": (lambda run, ckpt: ckpt, "is the checkpoint it exports"),
    "the-checkpoints-directory": (
        lambda run, ckpt: run / "checkpoints" / "hf",
        "is inside the checkpoints directory",
    ),
    "another-checkpoint": (
        lambda run, ckpt: run / "checkpoints" / "step-00000001" / "hf",
        "is inside the checkpoint directory",
    ),
}


@pytest.mark.parametrize("case", sorted(OUT_IN_CHECKPOINTS))
def test_export_refuses_an_out_in_the_checkpoints_before_writing(case, apply_run, tmp_path, capsys):
    """Issue 31: `trainer export C --out C/hf` wrote into the checkpoint, which then no
    longer verified (a stranger file). Refused, naming why; nothing written."""
    run, ckpt = _copy_run(apply_run, tmp_path)
    (run / "checkpoints" / "step-00000001").mkdir()  # another (incomplete) checkpoint
    out, words = OUT_IN_CHECKPOINTS[case]
    out = out(run, ckpt)
    before = files_under(run)
    assert main(["export", str(ckpt), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"trainer export: error: {out}: {words}"), err
    assert "choose an --out outside the checkpoints" in err and "nothing written" in err
    assert files_under(run) == before, "nothing written"
    assert out == ckpt or not out.exists()
    assert inspect_checkpoint(ckpt).valid, "the checkpoint still verifies"
    assert main(["export", str(ckpt), "--out", str(run / "export")]) == 0  # two-sided
    assert inspect_checkpoint(ckpt).valid


def test_export_refuses_a_directory_of_saved_checkpoints_but_not_a_mere_copy(
    apply_run, tmp_path, capsys
):
    """Checkpoints saved outside a run directory (save_checkpoint's `latest` beside them)
    are a directory of checkpoints too; a checkpoint copied alone into a scratch directory
    is not, and exporting beside it is fine (two-sided)."""
    saved = tmp_path / "saved"
    shutil.copytree(apply_run / "checkpoints", saved)  # step-00000003 and latest
    ckpt = saved / "step-00000003"
    assert main(["export", str(ckpt), "--out", str(saved / "hf")]) == 1
    assert "is inside the checkpoints directory" in capsys.readouterr().err
    scratch = tmp_path / "scratch"
    shutil.copytree(ckpt, scratch / ckpt.name)
    assert main(["export", str(scratch / ckpt.name), "--out", str(scratch / "hf")]) == 0


def _export(checkpoint: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer", "export", str(checkpoint), "--out", str(out)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_export_into_a_run_directory_another_process_writes_is_refused(apply_run, tmp_path):
    """The export takes the writer lock of the run directory it writes into: refused,
    naming the holder's pid, while another process holds it. It reads the checkpoint
    without one: an export elsewhere goes ahead meanwhile (readers never wait)."""
    run, ckpt = _copy_run(apply_run, tmp_path)
    with writer_lock(run, "trainer apply (this test)"):
        refused = _export(ckpt, run / "export")
        elsewhere = _export(ckpt, tmp_path / "release")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    said = f"another process is writing this run directory: pid {os.getpid()} "
    assert refused.stderr.startswith("trainer export: error: ") and said in refused.stderr
    assert not (run / "export").exists(), "nothing written"
    assert elsewhere.returncode == 0, elsewhere.stderr[-2000:]
    done = _export(ckpt, run / "export")  # the lock released: it exports
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in (run / "export").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
