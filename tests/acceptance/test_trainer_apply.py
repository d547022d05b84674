"""`trainer apply CONFIG`: trains on a corpus encoded here (not runs/demo), writes the run
manifest, one metrics line per step and training_state.json; bad input is one clear
message, exit 1, and nothing written."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tree import files_under
from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    encode_test_corpus,
    one_thread,
    write_run_config,
)
from trainer import cli


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    return encode_test_corpus(tmp_path_factory.mktemp("apply"))


def test_apply_trains_twenty_steps_and_writes_manifest_metrics_and_state(corpus, tmp_path, capsys):
    data, tok = corpus
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "unused", max_steps=40)
    out = tmp_path / "out"
    rc = cli.main(
        ["apply", str(config), "--stop-after", "20", "--out", str(out), "--device", "cpu"]
    )
    assert rc == 0, capsys.readouterr().err
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(1, 21))
    losses = [x["loss"] for x in lines]
    assert all(math.isfinite(v) for v in losses)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, f"loss does not fall: {losses}"
    assert all(x["grad_norm"] > 0 and x["tokens_per_s"] > 0 and "mfu" not in x for x in lines)
    assert lines[19]["lr"] < lines[1]["lr"], "the 40-step schedule, cut at step 20"
    manifest = json.loads((out / "run_manifest.json").read_text())
    for key in ("seed", "config", "versions", "git", "data_manifest_sha256", "host"):
        assert manifest[key] is not None, key
    assert set(manifest["versions"]) >= {"python", "torch", "cuda", "trainer"}
    assert set(manifest["git"]) == {"commit", "dirty"}
    assert manifest["force_token_budget"] is True
    assert manifest["config"]["apply"]["stop_after"] == 20
    state = json.loads((out / "training_state.json").read_text())
    assert state["last"]["step"] == 20 and state["last_step"] == 20
    assert not list(out.glob(".training_state.json.*")), "no temp file left behind"


def test_a_missing_config_is_one_message_exit_1_and_nothing_written(tmp_path, capsys):
    out = tmp_path / "out"
    rc = cli.main(["apply", str(tmp_path / "nope.yaml"), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "nope.yaml" in err and "Traceback" not in err
    assert not out.exists()


def test_a_config_with_errors_names_them_exit_1_and_nothing_written(corpus, tmp_path, capsys):
    data, tok = corpus
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "out", max_steps=0)
    rc = cli.main(["apply", str(config)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "training.max_steps" in err and "nothing written" in err
    assert not (tmp_path / "out").exists()


def test_missing_data_is_named_exit_1_and_nothing_written(corpus, tmp_path, capsys):
    _, tok = corpus
    config = write_run_config(tmp_path / "run.yaml", tmp_path / "no-data", tok, tmp_path / "out")
    rc = cli.main(["apply", str(config)])
    err = capsys.readouterr().err
    assert rc == 1
    assert "no-data" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_an_output_directory_holding_a_run_is_refused_and_left_alone(corpus, tmp_path, capsys):
    data, tok = corpus
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "out", max_steps=20)
    assert cli.main(["apply", str(config), "--stop-after", "2", "--device", "cpu"]) == 0
    before = (tmp_path / "out" / "metrics.jsonl").read_bytes()
    rc = cli.main(["apply", str(config), "--stop-after", "2", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "already holds a run" in err and "metrics.jsonl" in err
    assert (tmp_path / "out" / "metrics.jsonl").read_bytes() == before, "the first run's metrics"


def test_shards_of_another_vocabulary_are_refused_before_anything_is_written(
    corpus, tmp_path, capsys
):
    data, tok = corpus
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "out")
    text = config.read_text()
    vocab = int(text.split("vocab_size: ")[1].split()[0])
    config.write_text(text.replace(f"vocab_size: {vocab}", f"vocab_size: {vocab + 8}"))
    rc = cli.main(["apply", str(config), "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 1
    assert f"vocab_size {vocab + 8} != {vocab}" in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("resume", [False, True])
def test_a_second_writer_of_a_run_directory_is_refused_naming_the_first(
    corpus, tmp_path, capsys, resume
):
    """Issue 31: two `trainer apply` on one --out wrote every step twice. While another
    process holds the run directory's writer lock (what a running apply holds), apply -
    fresh or --resume - is refused naming that process, and the directory is unchanged."""
    data, tok = corpus
    config = write_run_config(
        tmp_path / "run.yaml", data, tok, tmp_path / "unused", max_steps=4, warmup_steps=0
    )
    out = tmp_path / "out"
    argv = ["apply", str(config), "--out", str(out), "--device", "cpu"]
    if resume:
        assert cli.main([*argv, "--stop-after", "2"]) == 0, capsys.readouterr().err
        argv.append("--resume")
    capsys.readouterr()
    before = files_under(out)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        rc = cli.main(argv)
        err = capsys.readouterr().err
    finally:
        holder.kill()
        holder.communicate()
    assert rc == 1, err
    assert f"another process is writing this run directory: pid {holder.pid} (" in err, err
    assert files_under(out) == before
    assert cli.main(argv) == 0, capsys.readouterr().err  # the holder gone, it runs


HOLD_LOCK = """
import sys, time
from pathlib import Path
from trainer.runfiles.lock import writer_lock
with writer_lock(Path(sys.argv[1]), "test holder"):
    print("locked", flush=True)
    time.sleep(120)
"""
