"""trainer/plot/: a run directory read back under the metrics rule, labels that tell runs
apart, and a figure whose bytes hold exactly the data and are the same on every re-plot."""

from __future__ import annotations

import math

import pytest

from tests.unit.trainer.plot_support import (
    affine_to,
    png_size,
    records,
    svg_lines,
    write_metrics,
)
from trainer.plot import figure
from trainer.plot.runs import RunDirError, load_run, run_labels
from trainer.runfiles.metrics_file import MetricsFileError, read_metrics


def test_read_metrics_drops_a_torn_last_line_and_names_a_bad_middle_line(tmp_path):
    path = write_metrics(tmp_path, records(3), tail='{"step": 4, "lo') / "metrics.jsonl"
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(MetricsFileError, match=r"metrics\.jsonl: line 2 is not JSON"):
        read_metrics(path)


def test_load_run_returns_every_step_and_the_validation_losses(tmp_path):
    rows = records(12, eval_every=5)
    rows[6]["loss"] = "nan"  # how the writer records a non-finite value
    run = load_run(write_metrics(tmp_path / "run", rows))
    assert run.steps == list(range(1, 13))
    assert run.loss[:6] == [r["loss"] for r in rows[:6]] and math.isnan(run.loss[6])
    assert run.lr == [r["lr"] for r in rows]
    assert run.grad_norm == [r["grad_norm"] for r in rows]
    assert run.val_steps == [5, 10]
    assert run.val_loss == [rows[4]["val_loss"], rows[9]["val_loss"]]


def test_records_carrying_alert_entries_read_as_before(tmp_path):
    # The loop adds "alerts" to a step's record when a monitoring.alerts rule fires.
    rows = records(6, eval_every=3)
    for row in rows[2:]:
        row["alerts"] = [{"rule": "loss > 1", "action": "warn", "value": row["loss"]}]
    run = load_run(write_metrics(tmp_path / "run", rows))
    plain = load_run(write_metrics(tmp_path / "plain", records(6, eval_every=3)))
    assert (run.steps, run.loss, run.lr, run.grad_norm, run.val_loss) == (
        plain.steps,
        plain.loss,
        plain.lr,
        plain.grad_norm,
        plain.val_loss,
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing", r"missing: no such directory"),
        (lambda d: (d / "file").write_text("x") and d / "file", r"file: not a directory"),
        (lambda d: (d / "empty-dir").mkdir() or d / "empty-dir", r"no metrics\.jsonl"),
        (lambda d: write_metrics(d / "empty", []), r"empty/metrics\.jsonl: no metrics"),
        (lambda d: write_metrics(d / "torn", [], tail='{"st'), r"torn/metrics\.jsonl: no metrics"),
        (
            lambda d: write_metrics(d / "bad", [*records(2), {"loss": 1.0}, *records(1)]),
            r"bad/metrics\.jsonl: line 3 has no integer step",
        ),
        (
            lambda d: write_metrics(d / "order", [*records(3), *records(2)]),
            r"order/metrics\.jsonl: line 4: step 1 after step 3",
        ),
        (
            lambda d: write_metrics(d / "text", [{**records(1)[0], "lr": "fast"}]),
            r"text/metrics\.jsonl: line 1: lr is not a number",
        ),
    ],
    ids=["missing", "file", "no-metrics", "empty", "only-torn", "bad-line", "order", "text"],
)
def test_load_run_refuses_what_is_not_a_plottable_run_naming_the_path(tmp_path, make, message):
    with pytest.raises(RunDirError, match=message):
        load_run(make(tmp_path))


def test_run_labels_are_directory_names_with_parents_only_to_tell_runs_apart(tmp_path):
    assert run_labels([tmp_path / "a", tmp_path / "b"]) == ["a", "b"]
    assert run_labels([tmp_path / "x/train", tmp_path / "y/train", tmp_path / "z"]) == [
        "x/train",
        "y/train",
        "z",
    ]
    with pytest.raises(ValueError, match="twice"):
        run_labels([tmp_path / "a", tmp_path / "b/../a"])


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plot")
    # 300 steps, a constant lr after warmup: matplotlib simplifies a path of >= 128 points,
    # dropping collinear ones, unless told not to; every recorded step must be drawn.
    first = load_run(write_metrics(root / "first", records(300, eval_every=100)))
    second = load_run(write_metrics(root / "second", records(17, scale=1.5)))
    return [first, second]


def test_the_svg_holds_one_line_per_run_per_panel_with_exactly_the_data(two_runs):
    lines = svg_lines(figure.to_bytes(figure.draw(two_runs, ["first", "second"]), "svg"))
    panels = {f"{key}-{i}" for key in ("loss", "lr", "grad_norm") for i in (0, 1)}
    assert set(lines) == {*panels, "val_loss-0"}, "the second run has no evaluations"
    for i, run in enumerate(two_runs):
        for key in ("loss", "lr", "grad_norm"):
            assert affine_to(lines[f"{key}-{i}"]["points"], run.steps, getattr(run, key)), key
    val = lines["val_loss-0"]
    assert affine_to(val["points"], two_runs[0].val_steps, two_runs[0].val_loss)
    assert val["markers"] == 3
    # One loss axis for both runs: the same y scale maps both runs' data.
    both = lines["loss-0"]["points"] + lines["loss-1"]["points"]
    loss = two_runs[0].loss + two_runs[1].loss
    assert affine_to(both, two_runs[0].steps + two_runs[1].steps, loss)


def test_the_png_is_a_png_of_the_figure_size_and_the_bytes_repeat(two_runs):
    png = figure.to_bytes(figure.draw(two_runs, ["first", "second"]), "png")
    panels = 3
    size = (int(figure.WIDTH_IN * figure.DPI), int(figure.PANEL_IN * panels * figure.DPI))
    assert png_size(png) == size
    assert figure.to_bytes(figure.draw(two_runs, ["first", "second"]), "png") == png
    svg = figure.to_bytes(figure.draw(two_runs, ["first", "second"]), "svg")
    assert figure.to_bytes(figure.draw(two_runs, ["first", "second"]), "svg") == svg
    for data in (png, svg):  # no version or date that would change the bytes tomorrow
        assert figure.CREATOR.encode() in data
        assert b"Matplotlib v" not in data and b"dc:date" not in data
