"""trainer/monitor/: the sparkline, a snapshot's numbers and alerts from a synthetic run,
the rich view, read-only-ness and readers racing a writer."""

from __future__ import annotations

import io
import json
import math
import threading

import pytest
from rich.console import Console

from tests.unit.trainer.monitor_support import NOW, make_run, record, tree_fingerprint
from trainer.monitor.snapshot import (
    RunDirError,
    duration,
    read_metrics_tail,
    take_snapshot,
)
from trainer.monitor.sparkline import sparkline
from trainer.monitor.view import render
from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.metrics_file import MetricsFileError
from trainer.runfiles.names import METRICS_FILE, TRAINING_STATE_FILE


# ------------------------------------------------------------------------------ sparkline
def test_sparkline_spans_the_blocks_from_lowest_to_highest():
    assert sparkline([1, 2, 3, 2]) == "▁▅█▅"
    assert sparkline([0, 7]) == "▁█"
    assert sparkline(list(range(8))) == "▁▂▃▄▅▆▇█"


def test_sparkline_flat_empty_width_and_non_finite():
    assert sparkline([]) == ""
    assert sparkline([3.0, 3.0]) == "▄▄"
    assert sparkline([9, 9, 1, 2, 3], width=3) == "▁▅█"
    # a NaN is marked and left out of the scale, so the rest keeps its shape
    assert sparkline([1.0, math.nan, 2.0]) == "▁!█"
    assert sparkline([1.0, math.inf, 2.0]) == "▁!█"  # an inf would squash the scale to 0
    assert sparkline([math.inf]) == "!"


# ------------------------------------------------------------------------------ snapshot
def test_snapshot_numbers_of_a_healthy_run(tmp_path):
    snap = take_snapshot(make_run(tmp_path / "run"), now=NOW)
    assert (snap.status, snap.step, snap.last_step) == ("running", 30, 50)
    assert snap.percent == pytest.approx(60.0)
    assert snap.step_s == pytest.approx(0.5)  # median of 0.4/0.5/0.6
    assert snap.tokens_per_s == pytest.approx(2000.0)  # median of 1000 / step_s
    assert snap.eta_s == pytest.approx(20 * 0.5)  # 20 steps left x median step time
    assert snap.elapsed_s == pytest.approx(30 * 0.5 + 1.0)  # since run_manifest, until NOW
    assert snap.updated_s_ago == pytest.approx(1.0)
    assert snap.loss == pytest.approx(7.0) and len(snap.losses) == 30
    assert snap.lrs[-1] == pytest.approx(1e-3)
    assert snap.last_checkpoint is not None and snap.last_checkpoint.step == 20
    assert snap.last_checkpoint.age_s == pytest.approx(1.0 + 10 * 0.5)
    assert snap.alerts == []


def test_a_checkpoint_without_its_manifest_is_not_the_last_one(tmp_path):
    run = make_run(tmp_path / "run")
    (run / "checkpoints" / "step-00000030").mkdir()  # being written: no manifest yet
    (run / "checkpoints" / "step-00000040.tmp").mkdir()  # staging
    assert take_snapshot(run, now=NOW).last_checkpoint.step == 20
    assert take_snapshot(make_run(tmp_path / "r2", checkpoints=()), now=NOW).last_checkpoint is None


def test_a_finished_run(tmp_path):
    snap = take_snapshot(make_run(tmp_path / "run", steps=50, updated_ago=5000), now=NOW)
    assert (snap.status, snap.percent, snap.eta_s) == ("finished", 100.0, 0.0)
    assert snap.elapsed_s == pytest.approx(50 * 0.5)  # start to the last write, not to NOW
    assert snap.alerts == []  # an old finished run is not stale


def _kinds(snap) -> list[str]:
    return [a.kind for a in snap.alerts]


def test_alert_non_finite_loss(tmp_path):
    run = make_run(tmp_path / "run", overrides={25: {"loss": "nan"}, 26: {"loss": "inf"}})
    snap = take_snapshot(run, now=NOW)
    assert _kinds(snap) == ["non_finite"]
    assert "step 25" in snap.alerts[0].message and "nan" in snap.alerts[0].message


def test_alert_grad_norm_spike_against_the_recent_median(tmp_path):
    snap = take_snapshot(make_run(tmp_path / "run", overrides={30: {"grad_norm": 6.0}}), now=NOW)
    assert _kinds(snap) == ["grad_norm_spike"]
    assert "step 30" in snap.alerts[0].message
    # 4x the median is not a spike
    calm = take_snapshot(make_run(tmp_path / "r2", overrides={30: {"grad_norm": 4.0}}), now=NOW)
    assert calm.alerts == []


def test_no_spike_alert_before_five_steps_of_history(tmp_path):
    early = make_run(tmp_path / "r1", steps=5, checkpoints=(), overrides={5: {"grad_norm": 9.0}})
    assert take_snapshot(early, now=NOW).alerts == []
    enough = make_run(tmp_path / "r2", steps=6, checkpoints=(), overrides={6: {"grad_norm": 9.0}})
    assert _kinds(take_snapshot(enough, now=NOW)) == ["grad_norm_spike"]


def test_alert_stale_run(tmp_path):
    snap = take_snapshot(make_run(tmp_path / "run", updated_ago=61.0), now=NOW)
    assert snap.status == "stale" and _kinds(snap) == ["stale"]
    assert "no update for 1m 01s" in snap.alerts[0].message
    # 10 median steps is 5 s here, but the floor is 60 s: evaluations and saves pause steps
    assert take_snapshot(make_run(tmp_path / "r2", updated_ago=59.0), now=NOW).status == "running"


def test_alert_val_loss_up(tmp_path):
    evals = {10: {"val_loss": 5.0}, 20: {"val_loss": 4.0}, 30: {"val_loss": 4.5}}
    snap = take_snapshot(make_run(tmp_path / "run", overrides=evals), now=NOW)
    assert _kinds(snap) == ["val_loss_up"]
    assert snap.val_loss == 4.5 and snap.val_losses == [[10, 5.0], [20, 4.0], [30, 4.5]]
    falling = {10: {"val_loss": 5.0}, 20: {"val_loss": 4.0}}
    assert take_snapshot(make_run(tmp_path / "r2", overrides=falling), now=NOW).alerts == []


def test_to_json_is_strict_json(tmp_path):
    run = make_run(tmp_path / "run", overrides={30: {"loss": "nan"}})
    data = take_snapshot(run, now=NOW).to_json()
    text = json.dumps(data, allow_nan=False)  # raises on a bare NaN
    assert json.loads(text)["loss"] == "nan"


# ------------------------------------------------------------------------- end of run
@pytest.mark.parametrize(
    ("status", "steps"),
    [("alert", 30), ("aborted", 30), ("signal", 30), ("early_stopping", 30), ("finished", 50)],
)
def test_a_run_that_recorded_its_end_shows_it_not_stale(tmp_path, status, steps):
    why = f"why it ended: {status}"
    run = make_run(tmp_path / "run", steps=steps, updated_ago=5000, end=(status, why))
    snap = take_snapshot(run, now=NOW)
    assert (snap.status, snap.reason, snap.ended_at) == (status, why, "2023-11-14T22:13:19+00:00")
    assert "stale" not in _kinds(snap)
    assert snap.elapsed_s == pytest.approx(steps * 0.5)  # start to the last write, not to NOW
    assert snap.eta_s == (0.0 if status == "finished" else None)  # nothing left to estimate
    out = _text(render(snap))
    assert f"ended       {status}: {why}" in out and status in out.splitlines()[-1]


def test_without_an_end_record_an_old_run_is_stale_and_a_live_one_running(tmp_path):
    # A SIGKILLed run writes nothing more: stale, as before the end record existed.
    killed = take_snapshot(make_run(tmp_path / "killed", updated_ago=5000), now=NOW)
    assert (killed.status, killed.reason, killed.ended_at) == ("stale", None, None)
    live = take_snapshot(make_run(tmp_path / "live"), now=NOW)
    assert (live.status, live.reason) == ("running", None)
    assert "ended" not in _text(render(live))


def test_an_end_status_the_trainer_never_writes_is_named(tmp_path):
    run = make_run(tmp_path / "run", end=("done", "?"))
    with pytest.raises(RunDirError, match=rf"{TRAINING_STATE_FILE}: status 'done' is not one of"):
        take_snapshot(run, now=NOW)


def test_the_config_alert_rules_that_fired_are_an_alert(tmp_path):
    fired = [{"rule": "grad_norm > 1", "action": "warn", "value": 1.02}]
    overrides = {s: {"alerts": fired} for s in (22, 26)}
    snap = take_snapshot(make_run(tmp_path / "run", overrides=overrides), now=NOW)
    assert _kinds(snap) == ["rule"]
    assert snap.alerts[0].message == (
        "step 26: grad_norm > 1 (warn, value 1.02) (fired on 2 of the last 30 steps)"
    )


# ------------------------------------------------------------------------- metrics.jsonl
def test_a_torn_last_line_is_skipped(tmp_path):
    run = make_run(tmp_path / "run")
    with (run / METRICS_FILE).open("a") as fh:
        fh.write(json.dumps(record(31))[:20])  # the trainer mid-append
    assert [r["step"] for r in read_metrics_tail(run / METRICS_FILE)] == list(range(1, 31))
    assert take_snapshot(run, now=NOW).step == 30


@pytest.mark.parametrize("max_bytes", [1 << 20, 400])  # the whole file, and a tail of it
def test_a_bad_line_before_the_last_names_file_and_line(tmp_path, max_bytes):
    run = make_run(tmp_path / "run")
    lines = (run / METRICS_FILE).read_text().splitlines()
    lines[27] = lines[27][:15]  # line 28 torn, with complete lines after it
    (run / METRICS_FILE).write_text("\n".join(lines) + "\n")
    with pytest.raises(MetricsFileError, match=rf"{METRICS_FILE}: line 28 is not JSON"):
        read_metrics_tail(run / METRICS_FILE, max_bytes=max_bytes)


def test_a_tail_reads_the_last_lines_only(tmp_path):
    run = make_run(tmp_path / "run")
    steps = [r["step"] for r in read_metrics_tail(run / METRICS_FILE, max_bytes=500)]
    assert steps and steps[-1] == 30 and steps[0] > 1
    assert steps == list(range(steps[0], 31))


def test_a_state_file_that_is_not_json_is_named(tmp_path):
    run = make_run(tmp_path / "run")
    (run / TRAINING_STATE_FILE).write_text('{"max_steps": 5')
    with pytest.raises(RunDirError, match=TRAINING_STATE_FILE):
        take_snapshot(run, now=NOW)


@pytest.mark.parametrize("make", ["missing", "file", "empty"])
def test_not_a_run_directory(tmp_path, make):
    path = tmp_path / "x"
    if make == "file":
        path.write_text("hi")
    if make == "empty":
        path.mkdir()
    with pytest.raises(RunDirError, match=str(path)):
        take_snapshot(path)


def test_only_metrics_without_a_state_file_is_a_run_of_unknown_length(tmp_path):
    run = make_run(tmp_path / "run")
    (run / TRAINING_STATE_FILE).unlink()
    snap = take_snapshot(run, now=NOW)
    assert (snap.step, snap.last_step, snap.eta_s, snap.status) == (30, None, None, "running")


# ---------------------------------------------------------------------------------- view
def _text(renderable) -> str:
    console = Console(file=io.StringIO(), width=110, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_view_shows_step_sparklines_checkpoint_and_alerts(tmp_path):
    run = make_run(tmp_path / "run", overrides={30: {"grad_norm": 9.0}})
    snap = take_snapshot(run, now=NOW)
    out = _text(render(snap))
    assert "30 / 50" in out and "(60.0 %)" in out
    assert sparkline(snap.losses, 60) in out and sparkline(snap.lrs, 60) in out
    assert "step 20, 6s ago" in out and "ETA" in out and "10s" in out
    assert "grad_norm_spike" in out and "running" in out


def test_view_prints_a_bracketed_path_as_itself(tmp_path):
    out = _text(render(take_snapshot(make_run(tmp_path / "[red]run"), now=NOW)))
    assert "[red]run" in out


def test_duration():
    assert [duration(s) for s in (None, 0.4, 12, 245, 3 * 3600 + 125)] == [
        "-",
        "0s",
        "12s",
        "4m 05s",
        "3h 02m",
    ]


# ------------------------------------------------------------------ read-only, concurrency
def test_taking_and_rendering_snapshots_changes_nothing_in_the_run(tmp_path):
    run = make_run(tmp_path / "run")
    with (run / METRICS_FILE).open("a") as fh:
        fh.write('{"step": 31, "lo')  # a torn line must not be "repaired"
    before = tree_fingerprint(run)
    for _ in range(3):
        _text(render(take_snapshot(run)))
    assert tree_fingerprint(run) == before


def test_two_readers_never_see_a_partial_state_while_a_writer_replaces_it(tmp_path):
    run = make_run(tmp_path / "run", steps=1, last_step=100_000, checkpoints=())
    writes, stop = 200, threading.Event()
    seen: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def writer() -> None:
        with (run / METRICS_FILE).open("a") as fh:
            for step in range(2, writes + 2):
                line = json.dumps(record(step)) + "\n"
                fh.write(line[:30])  # appended in two pieces: readers meet torn lines
                fh.flush()
                fh.write(line[30:])
                fh.flush()
                atomic_write_json(
                    run / TRAINING_STATE_FILE, {"max_steps": 100_000, "last": record(step)}
                )
        stop.set()

    def reader(out: list[int]) -> None:
        try:
            while not stop.is_set():
                out.append(take_snapshot(run).step)
        except BaseException as exc:  # any failure is the finding: report it, stop the race
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=reader, args=(s,)) for s in seen]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    for steps in seen:
        assert len(steps) > 10, "the readers raced the writer"
        assert steps == sorted(steps), "a reader went back in time"
    assert take_snapshot(run).step == writes + 1


def test_a_state_file_from_before_last_step_had_its_name_is_still_read(tmp_path):
    # training_state.json called the run's last step "max_steps" until that name was left
    # to the schedule's length alone; such a run still shows its progress.
    run = make_run(tmp_path / "run", steps=30, last_step=40)
    state = json.loads((run / TRAINING_STATE_FILE).read_text())
    state["max_steps"] = state.pop("last_step")
    atomic_write_json(run / TRAINING_STATE_FILE, state)
    snap = take_snapshot(run, now=NOW)
    assert (snap.step, snap.last_step, snap.percent) == (30, 40, pytest.approx(75.0))
