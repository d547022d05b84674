"""`trainer plot RUN_DIR...`: a real run drawn to RUN_DIR/plots (every step and evaluation
in the SVG, identical bytes on a re-plot), runs overlaid with --out, and bad input as one
message naming the path, exit 1, nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    encode_test_corpus,
    one_thread,
    write_run_config,
)
from tests.unit.trainer.plot_support import (
    affine_to,
    png_size,
    records,
    svg_lines,
    write_metrics,
)
from trainer import cli


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (temp files included) and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_real_run_is_plotted_into_its_directory_and_a_replot_is_byte_identical(tmp_path, capsys):
    data, tok = encode_test_corpus(tmp_path / "corpus")
    config = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "unused", max_steps=20)
    run = tmp_path / "run"
    rc = cli.main(["apply", str(config), "--out", str(run), "--device", "cpu"])
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()

    assert cli.main(["plot", str(run)]) == 0
    out = capsys.readouterr().out
    png, svg = run / "plots/loss.png", run / "plots/loss.svg"
    assert "run (20 steps)" in out and str(png) in out and str(svg) in out
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "val_loss" in r]
    assert [r["step"] for r in evals] == [10, 20], "eval_interval 10: the loop's val_loss"
    lines = svg_lines(svg.read_bytes())
    steps = [r["step"] for r in rows]
    for key in ("loss", "lr", "grad_norm"):
        assert affine_to(lines[f"{key}-0"]["points"], steps, [r[key] for r in rows]), key
    val = lines["val_loss-0"]
    assert affine_to(val["points"], [10, 20], [r["val_loss"] for r in evals])
    assert val["markers"] == 2
    assert png_size(png.read_bytes()) == (800, 780)

    first = _files(run / "plots")
    assert cli.main(["plot", str(run)]) == 0, "re-plotting our own output is allowed"
    assert _files(run / "plots") == first, "same run, same bytes; no temp file left"


def test_two_runs_of_one_name_are_overlaid_and_told_apart(tmp_path, capsys):
    a = write_metrics(tmp_path / "a/train", records(30, eval_every=10))
    b = write_metrics(tmp_path / "b/train", records(12, scale=1.5))
    out = tmp_path / "compare"
    assert cli.main(["plot", str(a), str(b), "--out", str(out), "--format", "svg"]) == 0
    assert "a/train (30 steps), b/train (12 steps)" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["loss.svg"]
    text = (out / "loss.svg").read_text()
    lines = svg_lines(text.encode())
    assert {len(lines[f"loss-{i}"]["points"]) for i in (0, 1)} == {30, 12}
    assert "val_loss-1" not in lines and lines["val_loss-0"]["markers"] == 3
    assert not (a / "plots").exists() and not (b / "plots").exists()


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda d: d / "missing", "missing: no such directory"),
        (lambda d: (d / "file").write_text("x") and d / "file", "file: not a directory"),
        (lambda d: (d / "no-metrics").mkdir() or d / "no-metrics", "no metrics.jsonl"),
        (lambda d: write_metrics(d / "empty", []), "empty/metrics.jsonl: no metrics"),
        (
            lambda d: write_metrics(d / "corrupt", records(2), tail='{"st\n' + '{"step": 3}\n'),
            "corrupt/metrics.jsonl: line 3 is not JSON",
        ),
    ],
    ids=["missing", "not-a-directory", "no-metrics", "empty-metrics", "corrupt-middle-line"],
)
def test_bad_run_directories_are_one_message_exit_1_and_nothing_written(
    tmp_path, capsys, make, named
):
    good = write_metrics(tmp_path / "good", records(5))
    bad = make(tmp_path)
    before = _files(tmp_path)
    rc = cli.main(["plot", str(good), str(bad), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 1
    assert named in err and "nothing written" in err and "Traceback" not in err
    assert _files(tmp_path) == before and not (tmp_path / "out").exists()


def test_a_file_trainer_plot_did_not_write_is_not_replaced(tmp_path, capsys):
    run = write_metrics(tmp_path / "run", records(5))
    (run / "plots").mkdir()
    (run / "plots/loss.svg").write_text("<svg>someone's drawing</svg>")
    assert cli.main(["plot", str(run)]) == 1
    err = capsys.readouterr().err
    assert "loss.svg exists and was not written by trainer plot" in err
    assert (run / "plots/loss.svg").read_text() == "<svg>someone's drawing</svg>"
    assert not (run / "plots/loss.png").exists(), "nothing written, not even the other format"
    (tmp_path / "taken").write_text("a file")
    assert cli.main(["plot", str(run), "--out", str(tmp_path / "taken")]) == 1
    assert "taken is not a directory" in capsys.readouterr().err
    assert (tmp_path / "taken").read_text() == "a file"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--format", "png,jpeg"], "unknown format 'jpeg'"),
        (["SECOND"], "several runs need --out"),
    ],
    ids=["unknown-format", "several-runs-without-out"],
)
def test_usage_errors_exit_2_and_write_nothing(tmp_path, capsys, argv, message):
    run = write_metrics(tmp_path / "run", records(5))
    argv = [str(write_metrics(tmp_path / "two", records(3))) if a == "SECOND" else a for a in argv]
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["plot", str(run), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (run / "plots").exists() and not (tmp_path / "two/plots").exists()


def test_a_write_interrupted_before_the_rename_leaves_the_old_plot_whole(
    tmp_path, capsys, monkeypatch
):
    run = write_metrics(tmp_path / "run", records(5))
    assert cli.main(["plot", str(run), "--format", "svg"]) == 0
    before = _files(run / "plots")
    write_metrics(run, records(9))  # the run went on: the next plot differs

    def interrupted(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", interrupted)
    assert cli.main(["plot", str(run), "--format", "svg"]) == 1
    assert "cannot write" in capsys.readouterr().err
    assert _files(run / "plots") == before, "old bytes, and no temp file left behind"
