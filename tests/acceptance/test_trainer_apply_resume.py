"""`trainer apply CONFIG --resume`: a run stopped at step 8 and resumed continues to 20
with the losses of the run that never stopped; another run's checkpoint is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    encode_test_corpus,
    one_thread,
    write_run_config,
)
from trainer import cli


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    return encode_test_corpus(tmp_path_factory.mktemp("resume"))


def _losses(out: Path) -> list[tuple[int, float]]:
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [(x["step"], x["loss"]) for x in lines]


def test_apply_resume_continues_bitwise_and_refuses_another_runs_checkpoint(
    corpus, tmp_path, capsys
):
    data, tok = corpus
    config = write_run_config(
        tmp_path / "run.yaml", data, tok, tmp_path / "unused", max_steps=20, save_interval=5
    )
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    assert cli.main(["apply", str(config), "--out", str(straight), "--device", "cpu"]) == 0
    args = ["apply", str(config), "--out", str(stopped), "--device", "cpu"]
    assert cli.main([*args, "--stop-after", "8"]) == 0
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir() if p.is_dir()) == [
        "step-00000005",
        "step-00000008",
    ]
    capsys.readouterr()
    assert cli.main([*args, "--resume"]) == 0, capsys.readouterr().err
    assert "resumed after step 8" in capsys.readouterr().out
    assert _losses(stopped) == _losses(straight), "the resumed run is not the straight run"

    # The loop's checkpoint names the config's tokenizer; the export carries it.
    final = stopped / "checkpoints" / "step-00000020"
    assert cli.main(["export", str(final), "--out", str(tmp_path / "export")]) == 0
    exported = sorted(p.name for p in (tmp_path / "export").iterdir())
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(exported), exported
    from tokenizers import Tokenizer  # noqa: PLC0415 - test-only dependency

    Tokenizer.from_file(str(tmp_path / "export" / "tokenizer.json"))

    other = write_run_config(
        tmp_path / "other.yaml", data, tok, tmp_path / "unused", max_steps=20, warmup_steps=1
    )
    rc = cli.main(["apply", str(other), "--out", str(stopped), "--device", "cpu", "--resume"])
    err = capsys.readouterr().err
    assert rc == 1 and "written by another run: config hash" in err, err
