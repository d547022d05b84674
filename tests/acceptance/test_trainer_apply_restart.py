"""`trainer apply` on a run directory it cannot simply continue (issue 20, defect 5):

- the same config under another file name resumes; a config of other content does not;
- a run stopped after its first step and before its first checkpoint: ``--resume`` says
  there is no checkpoint and what to do, ``--restart`` starts it over with no manual rm
  (the earlier files are moved aside, never deleted), and is refused for a run that has
  checkpoints.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    encode_test_corpus,
    one_thread,
    write_run_config,
)
from trainer import cli
from trainer.runfiles.names import WRITER_LOCK_FILE


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    return encode_test_corpus(tmp_path_factory.mktemp("restart"))


def _apply(capsys, config: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    rc = cli.main(["apply", str(config), "--out", str(out), "--device", "cpu", *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    return rc, captured.out, captured.err


def _steps(out: Path) -> list[int]:
    text = (out / "metrics.jsonl").read_text(encoding="utf-8")
    return [json.loads(line)["step"] for line in text.splitlines()]


def test_the_same_config_under_another_name_resumes_and_another_is_refused(
    corpus, tmp_path, capsys
):
    data, tok = corpus
    config = write_run_config(
        tmp_path / "run.yaml", data, tok, tmp_path / "unused", max_steps=20, save_interval=3
    )
    renamed = tmp_path / "run-renamed.yaml"
    shutil.copyfile(config, renamed)
    out = tmp_path / "out"
    assert _apply(capsys, config, out, "--stop-after", "3")[0] == 0
    rc, stdout, err = _apply(capsys, renamed, out, "--resume", "--stop-after", "5")
    assert rc == 0, err
    assert "resumed after step 3" in stdout

    other = write_run_config(
        tmp_path / "other.yaml", data, tok, tmp_path / "unused", max_steps=20, warmup_steps=1
    )
    rc, _, err = _apply(capsys, other, out, "--resume")
    assert rc == 1 and "written by another run: config hash" in err, err


def _run_without_checkpoint(capsys, config: Path, out: Path) -> None:
    """A run directory as a SIGKILL after step 2 and before the first save leaves it: its
    manifest, metrics, state and run store, and no checkpoint."""
    assert _apply(capsys, config, out, "--stop-after", "2")[0] == 0
    shutil.rmtree(out / "checkpoints")
    assert _steps(out) == [1, 2]


def test_a_run_killed_before_its_first_checkpoint_is_restarted_not_resumed(
    corpus, tmp_path, capsys
):
    data, tok = corpus
    config = write_run_config(
        tmp_path / "run.yaml", data, tok, tmp_path / "unused", max_steps=20, save_interval=1000
    )
    out = tmp_path / "out"
    _run_without_checkpoint(capsys, config, out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if _run_file(p)}

    rc, _, err = _apply(capsys, config, out, "--resume")
    assert rc == 1, err
    assert "no checkpoint" in err and "--restart" in err and "2 step(s)" in err, err
    rc, _, err = _apply(capsys, config, out)  # a plain start says the same way on
    assert rc == 1 and "already holds a run" in err and "--restart" in err, err
    assert {p.name: p.read_bytes() for p in out.iterdir() if _run_file(p)} == before

    rc, stdout, err = _apply(capsys, config, out, "--restart", "--stop-after", "3")
    assert rc == 0, err
    assert "3 steps" in stdout and "resumed" not in stdout
    assert _steps(out) == [1, 2, 3]  # the new run's steps, each once
    aside = out / "before-restart-1"
    assert {p.name: p.read_bytes() for p in aside.iterdir() if _run_file(p)} == before
    assert (out / "checkpoints" / "step-00000003").is_dir()

    # Now it has a checkpoint: it is resumed, and a restart is refused.
    rc, _, err = _apply(capsys, config, out, "--restart")
    assert rc == 1 and "--resume" in err and "checkpoints" in err, err
    assert not (out / "before-restart-2").exists()
    rc, _, err = _apply(capsys, config, out, "--restart", "--resume")
    assert rc == 1 and "pass one" in err, err
    rc, stdout, err = _apply(capsys, config, out, "--resume", "--stop-after", "4")
    assert rc == 0 and "resumed after step 3" in stdout, err


def _run_file(path: Path) -> bool:
    """A file the run wrote (the writer lock records who took it, not what was run)."""
    return path.is_file() and path.name != WRITER_LOCK_FILE


def test_resume_of_a_directory_without_any_run_says_so(corpus, tmp_path, capsys):
    data, tok = corpus
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "unused")
    rc, _, err = _apply(capsys, config, tmp_path / "empty", "--resume")
    assert rc == 1 and "holds no run and no checkpoint" in err, err
    assert not (tmp_path / "empty").exists()


def test_a_planted_before_restart_symlink_is_never_followed(corpus, tmp_path, capsys):
    """--restart moves the run's files into a new before-restart-N it makes itself: a
    before-restart-1 symlink to a directory elsewhere (or to nothing) is passed over, and
    what it points at is untouched."""
    data, tok = corpus
    config = write_run_config(
        tmp_path / "run.yaml", data, tok, tmp_path / "unused", max_steps=20, save_interval=1000
    )
    out = tmp_path / "out"
    _run_without_checkpoint(capsys, config, out)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "before-restart-1").symlink_to(elsewhere)
    (out / "before-restart-2").symlink_to(tmp_path / "nothing")
    rc, _, err = _apply(capsys, config, out, "--restart", "--stop-after", "3")
    assert rc == 0, err
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "nothing").exists()
    assert (out / "before-restart-3" / "metrics.jsonl").is_file()
