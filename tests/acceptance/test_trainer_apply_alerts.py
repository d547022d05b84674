"""`trainer apply` with monitoring.alerts on a corpus encoded here: a warn rule reports and
the run finishes (exit 0, records carry the alerts); a stop rule ends the run after the
first step that breaches it - not at the step whose value equals the threshold - with
exit 4, the rule, step and value on stderr, that step's checkpoint (valid) and
training_state.json status "alert", which `trainer monitor` shows; an aborted run is
status "aborted" (exit 5). Both statuses are the trainer's own (trainer/exit_codes.py),
never a framework code (3 is pv's and gates' INTERNAL)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    encode_test_corpus,
    one_thread,
    single_intra_op_thread,
    write_run_config,
)
from trainer import cli, exit_codes
from trainer.checkpoint.layout import checkpoint_dirs, step_of
from trainer.checkpoint.verify import inspect_checkpoint

STEPS = 12


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, Path]:
    return encode_test_corpus(tmp_path_factory.mktemp("alerts"))


def _config(tmp_path: Path, corpus, rules: str, **training) -> Path:
    data, tok = corpus
    fields = {"max_steps": 40, "save_interval": 1000, **training}
    path = write_run_config(tmp_path / "run.yaml", data, tok, tmp_path / "unused", **fields)
    path.write_text(path.read_text() + "  alerts:\n" + rules, encoding="utf-8")
    return path


def _apply(config: Path, out: Path, capsys, *extra: str) -> tuple[int, str, str]:
    argv = ["apply", str(config), "--out", str(out), "--device", "cpu", *extra]
    rc = cli.main(argv)
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def _state(out: Path) -> dict:
    return json.loads((out / "training_state.json").read_text())


@pytest.fixture(scope="module")
def warned(corpus, tmp_path_factory) -> tuple[Path, str, list[dict]]:
    """A 12-step run with a warn rule on every step from 2 on: (out, stderr, records)."""
    tmp = tmp_path_factory.mktemp("warned")
    rules = "    - when: grad_norm > 0\n      action: warn\n      after_step: 2\n"
    out, err = tmp / "out", io.StringIO()
    argv = ["apply", str(_config(tmp, corpus, rules)), "--out", str(out), "--device", "cpu"]
    # capsys is per test; this run is per module, so set up before one_thread: one thread
    # here too, or the tests' runs would not be this one step for step.
    with contextlib.redirect_stderr(err), single_intra_op_thread():
        rc = cli.main([*argv, "--stop-after", str(STEPS)])
    assert rc == 0, err.getvalue()
    return out, err.getvalue(), _lines(out)


def test_a_warn_rule_reports_every_breach_and_the_run_finishes(warned):
    out, err, records = warned
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    assert "alerts" not in records[0], "after_step 2: step 1 is not checked"
    for r in records[1:]:
        assert r["alerts"] == [{"rule": "grad_norm > 0", "action": "warn", "value": r["grad_norm"]}]
    warnings = [x for x in err.splitlines() if x.startswith("trainer: alert: ")]
    assert len(warnings) == STEPS - 1
    assert (
        warnings[0].startswith("trainer: alert: step 2: grad_norm ")
        and '"grad_norm > 0" (warn)' in warnings[0]
    )
    state = _state(out)
    assert (state["status"], state["reason"]) == (
        "finished",
        f"step {STEPS}: last step {STEPS} reached",
    )


def test_a_stop_rule_fires_at_the_first_breaching_step_exit_4_with_its_checkpoint(
    corpus, warned, tmp_path, capsys
):
    losses = [r["loss"] for r in warned[2]]  # the same run, step for step (deterministic)
    # The first step whose loss rose: the rule "loss > (the loss before it)" from the step
    # before, where value == threshold must not fire.
    k = next(s for s in range(3, STEPS + 1) if losses[s - 1] > losses[s - 2])
    threshold = losses[k - 2]
    rules = (
        f"    - when: loss > {threshold!r}\n      action: stop\n      after_step: {k - 1}\n"
        "    - when: grad_norm > 0\n      action: warn\n      after_step: 2\n"
    )
    out = tmp_path / "out"
    rc, stdout, err = _apply(
        _config(tmp_path, corpus, rules), out, capsys, "--stop-after", str(STEPS)
    )
    assert rc == exit_codes.ALERT_STOPPED == 4, err
    records = _lines(out)
    assert [r["step"] for r in records] == list(range(1, k + 1)), "not stopped after step k"
    assert [r["loss"] for r in records] == losses[:k]
    value = losses[k - 1]
    assert (
        f"trainer apply: stopped by an alert: step {k}: loss {value!r} breaches "
        f'monitoring.alerts[0] "loss > {threshold!r}" (stop); checkpoint of step {k} saved'
    ) in err, err
    assert f"{k} steps (alert)" in stdout
    assert records[-1]["alerts"][0] == {
        "rule": f"loss > {threshold!r}",
        "action": "stop",
        "value": value,
    }
    assert all(a["action"] == "warn" for r in records[:-1] for a in r.get("alerts", []))
    newest = checkpoint_dirs(out / "checkpoints")[0]
    assert step_of(newest) == k and inspect_checkpoint(newest).valid
    state = _state(out)
    assert (state["status"], state["last"]["step"]) == ("alert", k)
    assert f"step {k}: loss {value!r} breaches" in state["reason"]

    assert cli.main(["monitor", str(out), "--json"]) == 0
    snap = json.loads(capsys.readouterr().out)
    assert (snap["status"], snap["step"], snap["eta_s"]) == ("alert", k, None)
    assert snap["reason"] == state["reason"] and snap["ended_at"] == state["ended_at"]
    assert any(a["kind"] == "rule" for a in snap["alerts"])


def test_an_aborted_run_exits_5_and_records_aborted(corpus, tmp_path, capsys):
    config = _config(
        tmp_path, corpus, "    - when: loss > 100\n      action: stop\n", wrap_around=False
    )
    out = tmp_path / "out"
    rc, _, err = _apply(config, out, capsys)
    assert rc == exit_codes.ABORTED == 5, err
    state = _state(out)
    assert state["status"] == "aborted" and state["reason"].startswith("DataExhaustedError: step ")
    assert cli.main(["monitor", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "aborted"
