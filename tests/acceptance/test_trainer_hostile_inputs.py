"""Hostile paths and files given to `trainer` (issue 20, defects 4 and 5): every one is a
``trainer <command>: error: PATH: WHAT`` line on stderr, exit 1, nothing written, and no
Python traceback; the valid counterpart of each still works.

    --out an existing file, a path under a file, an unwritable directory, a non-UTF-8 name
        (`trainer apply`, `trainer export`)
    a checkpoint whose manifest's ``files`` entry is not an object (inspect, export), or
        whose optimizer file lacks a tensor (resume falls back to the older checkpoint)
    a checkpoint with non-finite weights (export refuses, naming the tensor)
    a data directory whose manifest.json is a FIFO (refused, not a hang)
    a run whose metrics.jsonl is a FIFO (`trainer apply --resume` refuses it at once;
        issue 31: it waited for a reader, past SIGTERM)
    a checkpoint whose state.json holds a wrong-typed ``divergence``, or a step that is
        not its directory's (issue 31: inspect and resume agree, with the same reason)
    a second Ctrl-C while the process shuts down (no traceback, never exit -2)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.unit.trainer.checkpoint_support import save, trained
from tests.unit.trainer.loop_support import encode_test_corpus, write_run_config
from trainer.checkpoint.layout import MANIFEST_FILE, OPTIMIZER_FILE, checkpoint_dirs, step_of
from trainer.checkpoint.manifest import file_entry

pytestmark = pytest.mark.slow  # each a `python -m trainer` subprocess: about 55 s in all on 2 cores

ROOT = Path(__file__).resolve().parents[2]
NON_UTF8 = os.fsdecode(b"out-\xff")  # a name of bytes that are not UTF-8


def trainer(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python -m trainer ARGS` (the process's own command line), stdout and stderr text."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "trainer", *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            capture_output=True,
            text=True,
            errors="backslashreplace",
            timeout=timeout,
            check=False,  # the status is asserted with the stderr
        )
    except subprocess.TimeoutExpired:  # killed; the test fails by assertion, not a hang
        raise AssertionError(f"trainer {' '.join(args)} did not finish in {timeout} s") from None


def refused(proc: subprocess.CompletedProcess, command: str, *words: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = next((x for x in proc.stderr.splitlines() if x.startswith(f"trainer {command}:")), "")
    assert "error:" in line, proc.stderr[-2000:]
    for word in words:  # the message may go on over the next lines (a list of problems)
        assert word in proc.stderr, (word, proc.stderr[-2000:])


@contextlib.contextmanager
def unwritable(directory: Path):
    """``directory`` that this process cannot create entries in: mode 0o555, and for root
    (whom modes do not stop) the immutable attribute; skipped where neither holds."""
    directory.mkdir()
    directory.chmod(0o555)
    immutable = os.geteuid() == 0 and shutil.which("chattr") is not None
    if immutable:
        immutable = subprocess.run(["chattr", "+i", str(directory)], check=False).returncode == 0
    try:
        if os.access(directory, os.W_OK):
            pytest.skip("cannot make a directory unwritable here (root without chattr)")
        yield directory
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(directory)], check=False)
        directory.chmod(0o755)


def _bad_outs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    (tmp_path / "a-file").write_text("not a directory\n")
    return {
        "existing-file": (tmp_path / "a-file", "a-file"),
        "under-a-file": (tmp_path / "a-file" / "sub", "a-file is not a directory"),
        "non-utf8": (tmp_path / NON_UTF8, "not a UTF-8 name"),
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    return encode_test_corpus(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    model, optimizer = trained(steps=1)
    return save(tmp_path_factory.mktemp("ckpt") / "run", 3, model, optimizer)


# ---------------------------------------------------------------- --out


@pytest.mark.parametrize("case", ["existing-file", "under-a-file", "non-utf8"])
def test_export_out_that_cannot_be_a_directory_is_an_error(case, checkpoint, tmp_path):
    out, words = _bad_outs(tmp_path)[case]
    before = sorted(os.listdir(tmp_path))
    refused(trainer("export", str(checkpoint), "--out", str(out)), "export", words)
    assert sorted(os.listdir(tmp_path)) == before, "nothing written"


def test_export_out_in_an_unwritable_directory_is_an_error(checkpoint, tmp_path):
    with unwritable(tmp_path / "locked") as locked:
        proc = trainer("export", str(checkpoint), "--out", str(locked / "out"))
        refused(proc, "export", "not writable")
        assert os.listdir(locked) == []
    ok = trainer("export", str(checkpoint), "--out", str(tmp_path / "fine"))
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert sorted(os.listdir(tmp_path / "fine")) == ["config.json", "model.safetensors"]


@pytest.mark.parametrize("case", ["existing-file", "under-a-file", "non-utf8", "unwritable"])
def test_apply_out_that_cannot_be_written_is_an_error_and_nothing_is_written(
    case, corpus, tmp_path
):
    data, tok = corpus
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "unused")
    before = sorted(os.listdir(tmp_path))
    if case == "unwritable":
        with unwritable(tmp_path / "locked") as locked:
            proc = trainer("apply", str(config), "--out", str(locked / "out"), "--device", "cpu")
            refused(proc, "apply", "not writable", "nothing written")
            assert os.listdir(locked) == []
        return
    out, words = _bad_outs(tmp_path)[case]
    before = sorted(os.listdir(tmp_path))
    proc = trainer("apply", str(config), "--out", str(out), "--device", "cpu")
    refused(proc, "apply", words, "nothing written")
    assert sorted(os.listdir(tmp_path)) == before, "nothing written"


def test_apply_to_a_new_out_directory_still_trains(corpus, tmp_path):
    data, tok = corpus
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "unused")
    proc = trainer(
        "apply", str(config), "--out", str(tmp_path / "new" / "run"), "--stop-after", "2"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "new" / "run" / "metrics.jsonl").is_file()


# ---------------------------------------------------------------- damaged checkpoints


def test_inspect_and_export_of_a_manifest_whose_files_entry_is_not_an_object(checkpoint, tmp_path):
    ckpt = tmp_path / checkpoint.name
    shutil.copytree(checkpoint, ckpt)
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    manifest["files"]["state.json"] = 42
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))
    proc = trainer("inspect", str(ckpt))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "files entry 'state.json' is 42" in proc.stderr and "INVALID" in proc.stdout
    proc = trainer("inspect", str(ckpt), "--json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["valid"] is False
    refused(trainer("export", str(ckpt), "--out", str(tmp_path / "out")), "export", "files entry")
    assert not (tmp_path / "out").exists()


def test_resume_falls_back_past_a_checkpoint_missing_an_optimizer_tensor(corpus, tmp_path):
    data, tok = corpus
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "out", save_interval=2)
    first = trainer("apply", str(config), "--stop-after", "4", "--device", "cpu")
    assert first.returncode == 0, first.stderr[-2000:]
    newest = checkpoint_dirs(tmp_path / "out" / "checkpoints")[0]
    assert step_of(newest) == 4
    tensors = load_file(str(newest / OPTIMIZER_FILE))
    del tensors[next(n for n in tensors if n.endswith(".exp_avg"))]
    save_file(tensors, str(newest / OPTIMIZER_FILE))
    manifest = json.loads((newest / MANIFEST_FILE).read_text())
    manifest["files"][OPTIMIZER_FILE] = file_entry(newest / OPTIMIZER_FILE)
    (newest / MANIFEST_FILE).write_text(json.dumps(manifest))

    proc = trainer("apply", str(config), "--resume", "--stop-after", "6", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert f"skipping checkpoint {newest}" in proc.stderr, proc.stderr[-3000:]
    assert "missing exp_avg" in proc.stderr
    assert "resumed after step 2" in proc.stdout, proc.stdout


def test_export_refuses_non_finite_weights_naming_the_tensor(tmp_path):
    model, optimizer = trained(steps=1)
    finite = save(tmp_path / "run", 2, model, optimizer)
    with torch.no_grad():
        model.model.norm.weight[3] = float("nan")
        model.model.layers[0].mlp.up_proj.weight[0, 0] = float("inf")
    ckpt = save(tmp_path / "run", 3, model, optimizer)
    proc = trainer("export", str(ckpt), "--out", str(tmp_path / "out"))
    refused(proc, "export", "non-finite weights", "model.norm.weight (1 NaN")
    assert "model.layers.0.mlp.up_proj.weight (0 NaN, 1 infinite" in proc.stderr
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"], "no staging directory left"
    ok = trainer("export", str(finite), "--out", str(tmp_path / "out"))
    assert ok.returncode == 0, ok.stderr[-2000:]


# ---------------------------------------------------------------- special files


def test_a_data_manifest_that_is_a_fifo_is_refused_not_waited_on(corpus, tmp_path):
    _, tok = corpus
    data = tmp_path / "data"
    data.mkdir()
    os.mkfifo(data / "manifest.json")
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "out")
    proc = trainer("apply", str(config), "--device", "cpu", timeout=30)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert "manifest.json" in proc.stderr and "FIFO" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def resumable(corpus, tmp_path_factory) -> tuple[Path, Path]:
    """(config, run directory) of a 2-step run checkpointed at step 2, to copy and damage."""
    data, tok = corpus
    root = tmp_path_factory.mktemp("resumable")
    config = write_run_config(
        root / "run.yaml", data, tok, root / "unused", max_steps=4, save_interval=2,
        warmup_steps=0,
    )  # fmt: skip
    proc = trainer("apply", str(config), "--out", str(root / "run"), "--stop-after", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [step_of(p) for p in checkpoint_dirs(root / "run" / "checkpoints")] == [2]
    return config, root / "run"


def _copy_run(resumable: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    config, run = resumable
    shutil.copytree(run, tmp_path / "run")
    return config, tmp_path / "run"


def test_a_fifo_metrics_file_is_refused_by_resume_at_once(resumable, tmp_path):
    """Issue 31: the append to a FIFO metrics.jsonl waited for a reader forever, and
    SIGTERM did not stop it. Now: refused before a step, saying it is a FIFO."""
    config, run = _copy_run(resumable, tmp_path)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    proc = trainer("apply", str(config), "--out", str(run), "--resume", timeout=60)
    refused(proc, "apply", "cannot resume", f"{run / 'metrics.jsonl'}: a FIFO (named pipe)")
    assert (run / "metrics.jsonl").is_fifo(), "left as it is"
    assert [step_of(p) for p in checkpoint_dirs(run / "checkpoints")] == [2], "no step taken"


def test_a_fifo_metrics_file_of_a_run_without_a_checkpoint_is_named_not_waited_on(
    resumable, tmp_path
):
    """`--resume` of a run with no checkpoint counts its recorded steps to say what to do:
    that read waited on a FIFO metrics.jsonl forever."""
    config, run = _copy_run(resumable, tmp_path)
    shutil.rmtree(run / "checkpoints")
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    proc = trainer("apply", str(config), "--out", str(run), "--resume", timeout=60)
    refused(proc, "apply", "cannot resume", "an unreadable metrics.jsonl (")
    assert "FIFO" in proc.stderr, proc.stderr[-2000:]


def test_a_fifo_manifest_in_a_checkpoint_named_for_resume_is_not_waited_on(resumable, tmp_path):
    """`--resume PATH` reads the checkpoint's manifest for the vocabulary preflight: a FIFO
    there blocked it; now the checkpoint's own verification refuses it, naming the file."""
    config, run = _copy_run(resumable, tmp_path)
    ckpt = checkpoint_dirs(run / "checkpoints")[0]
    (ckpt / MANIFEST_FILE).unlink()
    os.mkfifo(ckpt / MANIFEST_FILE)
    proc = trainer("apply", str(config), "--out", str(run), "--resume", str(ckpt), timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "FIFO" in proc.stderr, proc.stderr[-2000:]


def test_the_same_run_with_its_metrics_file_resumes(resumable, tmp_path):
    """Two-sided: the copy the test above damages resumes to its end."""
    config, run = _copy_run(resumable, tmp_path)
    proc = trainer("apply", str(config), "--out", str(run), "--resume", timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resumed after step 2" in proc.stdout, proc.stdout


def _damage_state(ckpt: Path, **fields: object) -> None:
    """Rewrite ``fields`` of ``ckpt``'s state.json, its manifest entry rehashed (the
    checksums agree: only inspect's and resume's reading of the contents can object)."""
    path = ckpt / "state.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    manifest["files"]["state.json"] = file_entry(path)
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))


STATE_DAMAGE = {
    "divergence-wrong-type": (
        {"divergence": 5},
        "divergence is 5, not null or an object of vocab_size, previous, evals",
    ),
    "step-not-the-directory's": (
        {"step": 3, "scheduler_step": 3},
        "step 3, but the checkpoint is step 2 (its manifest and its name step-00000002)",
    ),
}


@pytest.mark.parametrize("case", sorted(STATE_DAMAGE))
def test_inspect_and_resume_refuse_a_damaged_state_with_one_reason(case, resumable, tmp_path):
    """Issue 31: inspect called these checkpoints valid; resume then crashed (TypeError on
    the divergence) or went on from a step its directory is not."""
    fields, reason = STATE_DAMAGE[case]
    config, run = _copy_run(resumable, tmp_path)
    (ckpt,) = checkpoint_dirs(run / "checkpoints")
    _damage_state(ckpt, **fields)
    proc = trainer("inspect", str(ckpt))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert reason in proc.stderr and "INVALID" in proc.stdout, (proc.stdout, proc.stderr)
    proc = trainer("apply", str(config), "--out", str(run), "--resume", str(ckpt), timeout=120)
    refused(proc, "apply", "cannot resume", reason)
    proc = trainer("apply", str(config), "--out", str(run), "--resume", timeout=120)
    refused(proc, "apply", "no valid checkpoint to resume from", reason)


# ---------------------------------------------------------------- a second Ctrl-C


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # even when the test runner ignores it


def test_ctrl_c_during_shutdown_is_no_traceback(corpus, tmp_path):
    """The first SIGINT stops the run after its step and a checkpoint; SIGINTs keep coming
    (a user pressing Ctrl-C again) until the process has exited."""
    data, tok = corpus
    config = write_run_config(
        tmp_path / "run.yaml", data, tok, tmp_path / "out", max_steps=20_000, epochs=2_000
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", "apply", str(config), "--device", "cpu"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,  # noqa: PLW1509 - only a signal disposition
    )
    metrics = tmp_path / "out" / "metrics.jsonl"
    deadline = time.monotonic() + 60
    while (not metrics.exists() or metrics.stat().st_size == 0) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    while proc.poll() is None and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        time.sleep(0.0005)
    stdout, stderr = proc.communicate(timeout=60)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]
    # 0: the run's own status (the Ctrl-C came once the command had returned, while the
    # interpreter shut down); 130: it came while the command wound down after the loop,
    # which says so. Never -2 (killed by SIGINT with a KeyboardInterrupt traceback).
    assert proc.returncode in (0, 130), (proc.returncode, stderr[-2000:])
    if proc.returncode == 130:
        assert stderr.rstrip().endswith("trainer: interrupted"), stderr[-2000:]
    else:
        assert "(signal" in stdout, stdout
    assert checkpoint_dirs(tmp_path / "out" / "checkpoints"), "the first Ctrl-C's checkpoint"


def test_inspect_and_export_of_a_checkpoint_under_a_non_utf8_name(checkpoint, tmp_path):
    ckpt = tmp_path / NON_UTF8 / checkpoint.name
    shutil.copytree(checkpoint, ckpt)
    strict = {"PYTHONIOENCODING": "utf-8"}  # stdout as a UTF-8 locale's: surrogates raise
    proc = trainer("inspect", str(ckpt), env=strict)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "out-\\xff" in proc.stderr and "not a UTF-8 name" in proc.stderr
    proc = trainer("export", str(ckpt), "--out", str(tmp_path / "out"), env=strict)
    refused(proc, "export", "not a UTF-8 name")
    assert not (tmp_path / "out").exists()
