"""Alert rules in the loop (trainer/train/alerts.py, loop.py) and the end-of-run record
(MetricsWriter.finish): rule boundaries one by one; a stop rule ends the run after the
first step that breaches it, with that step's checkpoint; a warn rule only reports;
training_state.json says how every run ended (finished, early_stopping, signal, alert,
aborted), and a resume drops the end record while it runs again."""

from __future__ import annotations

import json
import logging
import math
import os
import signal

import pytest
import torch

from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    TensorSequences,
    loop_config,
    one_thread,
    random_rows,
    tiny_config,
)
from trainer.checkpoint.layout import checkpoint_dirs, step_of
from trainer.checkpoint.verify import inspect_checkpoint
from trainer.config.alerts import METRICS, AlertRule, parse_rule
from trainer.runfiles.names import TRAINING_STATE_FILE
from trainer.runfiles.training_state import END_STATUSES
from trainer.train import alerts, guards, loop, metrics
from trainer.train.options import RunOptions


def rule(when: str, action: str = "stop", after_step: int = 0) -> AlertRule:
    return parse_rule({"when": when, "action": action, "after_step": after_step})


def record(step: int = 5, **values: float) -> dict:
    return {"step": step, "loss": 3.0, "grad_norm": 1.0, "lr": 1e-3, **values}


# ---------------------------------------------------------------- rule boundaries
@pytest.mark.parametrize(
    ("comparator", "below", "equal", "above"),
    [(">", False, False, True), (">=", False, True, True), ("<", True, False, False),
     ("<=", True, True, False)],
)  # fmt: skip
def test_each_comparator_at_and_next_to_its_threshold(comparator, below, equal, above):
    r = rule(f"loss {comparator} 12.0")
    fires = [bool(alerts.check([r], record(loss=v))) for v in (
        math.nextafter(12.0, 0), 12.0, math.nextafter(12.0, 99)
    )]  # fmt: skip
    assert fires == [below, equal, above]


def test_after_step_checks_from_that_step_on():
    r = rule("loss > 1", after_step=10)
    assert alerts.check([r], record(step=9)) == []
    assert [f.step for f in alerts.check([r], record(step=10))] == [10]
    assert [f.step for f in alerts.check([r], record(step=11))] == [11]


def test_val_loss_is_checked_on_evaluation_steps_only():
    r = rule("val_loss > 2", action="warn")
    assert alerts.check([r], record()) == []  # no evaluation at this step
    (fired,) = alerts.check([r], record(val_loss=2.5))
    assert (fired.value, fired.rule.action) == (2.5, "warn")


def test_a_nan_never_breaches_and_inf_does():
    for comparator in (">", ">=", "<", "<="):
        assert alerts.check([rule(f"grad_norm {comparator} 1")], record(grad_norm=math.nan)) == []
    (fired,) = alerts.check([rule("tokens_per_s > 10")], record(tokens_per_s=math.inf))
    assert fired.to_json()["value"] == "inf"  # strict JSON in metrics.jsonl
    json.dumps(fired.to_json(), allow_nan=False)


def test_fired_rules_go_into_the_record_in_rule_order_and_no_key_otherwise():
    rules = [rule("loss > 1", "warn"), rule("grad_norm > 5"), rule("loss > 2", "stop")]
    plain = record()
    alerts.annotate(plain, alerts.check(rules[1:2], plain))
    assert "alerts" not in plain, "a record without alerts stays as it was"
    rec = record()
    fired = alerts.check(rules, rec)
    alerts.annotate(rec, fired)
    assert rec["alerts"] == [
        {"rule": "loss > 1", "action": "warn", "value": 3.0},
        {"rule": "loss > 2", "action": "stop", "value": 3.0},
    ]
    assert alerts.first_stop(fired).index == 2
    assert fired[1].message() == 'step 5: loss 3.0 breaches monitoring.alerts[2] "loss > 2" (stop)'


def test_the_ranks_exchange_names_the_first_rank_that_stopped():
    rules = [rule("step_s > 1"), rule("step_s > 2")]
    fired = alerts.Fired(1, rules[1], 7, 2.5)
    got = alerts.decode([alerts.encode(None), alerts.encode(fired)], rules, 7)
    assert (got.index, got.value, got.rank, got.step) == (1, 2.5, 1, 7)
    assert "on rank 1" in got.message()
    assert alerts.decode([[], []], rules, 7) is None


def test_every_alert_metric_is_in_a_step_record():
    writer = metrics.MetricsWriter(None, tiny_config(), 8, torch.device("cpu"))
    rec = writer.step_record(1, epoch=0, loss=1.0, lr=1e-3, grad_norm=1.0, tokens=8, seconds=1.0)
    assert set(METRICS) - {"val_loss"} <= set(rec), "a rule on a metric the loop never records"


# ---------------------------------------------------------------- the loop
def _data():
    return TensorSequences(random_rows(32, 8, seed=4))  # 8 steps per epoch


def _train(out, values=None, val=None, *, hooks=None, **options) -> loop.TrainResult:
    """12 steps (``values`` replaced) into the run directory ``out``."""
    config = loop_config(
        {"training.seed": 5, "training.epochs": 5, "training.max_steps": 12} | (values or {})
    )
    options = RunOptions(out_dir=out, **options)
    return loop.train(config, _data(), val, options=options, hooks=hooks)


def _state(out) -> dict:
    return json.loads((out / TRAINING_STATE_FILE).read_text())


def test_a_stop_rule_on_grad_norm_ends_the_run_after_the_first_breaching_step(tmp_path):
    reference = _train(tmp_path / "ref")
    norms = reference.grad_norms
    # Threshold: step 2's norm exactly, from step 2 on; step 2 itself does not breach ">".
    first = next(s for s in range(3, 13) if norms[s - 1] > norms[1])
    r = rule(f"grad_norm > {norms[1]!r}", after_step=2)
    out = tmp_path / "run"
    result = _train(
        out, {"monitoring.alerts": (r,), "training.save_interval": 1000}, checkpoint=True
    )
    assert (result.stop_reason, result.steps_run) == ("alert", first)
    assert result.losses == reference.losses[:first], "the alert changed the steps before it"
    assert (result.alert.step, result.alert.value, result.alert.index) == (
        first,
        norms[first - 1],
        0,
    )
    assert "alerts" not in result.records[1], "value == threshold breached '>'"
    assert result.records[-1]["alerts"][0]["rule"] == r.when
    assert result.checkpoints == [first]
    (saved,) = checkpoint_dirs(out / "checkpoints")
    assert step_of(saved) == first and inspect_checkpoint(saved).valid
    state = _state(out)
    assert (state["status"], state["last"]["step"]) == ("alert", first)
    assert state["reason"] == result.alert.message() and state["ended_at"].endswith("+00:00")


def test_a_warn_rule_reports_each_breach_and_the_run_goes_on(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="trainer")
    r = rule("val_loss > 0", action="warn")
    val = TensorSequences(random_rows(8, 8, seed=9))
    result = _train(tmp_path, {"monitoring.alerts": (r,), "training.eval_interval": 4}, val)
    assert (result.stop_reason, result.steps_run, result.alert) == ("last_step", 12, None)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines if "alerts" in x] == [4, 8, 12]
    assert lines[3]["alerts"] == [
        {"rule": "val_loss > 0", "action": "warn", "value": lines[3]["val_loss"]}
    ]
    warned = [x.getMessage() for x in caplog.records if x.getMessage().startswith("alert:")]
    assert len(warned) == 3 and warned[0].startswith("alert: step 4: val_loss "), warned
    assert _state(tmp_path)["status"] == "finished"


# ---------------------------------------------------------------- end of run
def test_a_run_to_its_last_step_ends_finished(tmp_path):
    _train(tmp_path)
    state = _state(tmp_path)
    assert (state["status"], state["reason"]) == ("finished", "step 12: last step 12 reached")
    assert state["last"]["step"] == 12 and state["last_step"] == 12


def test_early_stopping_ends_early_stopping(tmp_path, monkeypatch):
    monkeypatch.setattr(guards, "check_validation_size", lambda tokens, early: None)
    monkeypatch.setattr(guards, "_should_stop", lambda *args: True)  # at the first evaluation
    val = TensorSequences(random_rows(8, 8, seed=9))
    result = _train(tmp_path, {"training.early_stopping": True, "training.eval_interval": 3}, val)
    assert (result.stop_reason, result.steps_run) == ("early_stopping", 3)
    state = _state(tmp_path)
    assert state["status"] == "early_stopping" and "step 3: validation loss" in state["reason"]


def test_sigterm_ends_signal(tmp_path):
    class TermAt5:
        def step_batches(self, step, *args):
            if step == 5:
                os.kill(os.getpid(), signal.SIGTERM)

    out = tmp_path / "run"
    result = _train(out, checkpoint=True, hooks=TermAt5())
    assert (result.stop_reason, result.steps_run) == ("signal", 5)
    state = _state(out)
    assert (state["status"], state["reason"]) == ("signal", "SIGTERM: stopped after step 5")


@pytest.mark.parametrize("error", ["non-finite", "any exception"])
def test_an_exception_ends_aborted_and_still_propagates(tmp_path, monkeypatch, error):
    if error == "non-finite":
        real = loop.loss.accumulate_gradients
        calls = {"n": 0}

        def nan_at_4(model, micro_batches, **kwargs):
            calls["n"] += 1
            value, count = real(model, micro_batches, **kwargs)
            return (math.nan if calls["n"] == 4 else value), count

        monkeypatch.setattr(loop.loss, "accumulate_gradients", nan_at_4)
        hooks, raised, words = None, guards.NonFiniteError, "NonFiniteError: step 4: loss is nan"
    else:

        class Boom:
            def after_step(self, step, record):
                if step == 6:
                    raise KeyError("boom")

        hooks, raised, words = Boom(), KeyError, "KeyError: 'boom'"
    with pytest.raises(raised):
        _train(tmp_path, hooks=hooks)
    state = _state(tmp_path)
    assert state["status"] == "aborted" and state["reason"].startswith(words), state["reason"]


def test_finish_without_a_step_and_with_a_bad_status(tmp_path):
    writer = metrics.MetricsWriter(tmp_path, tiny_config(), 8, torch.device("cpu"))
    writer.close()  # finish needs no open metrics file
    writer.finish("aborted", "before step 1", last_step=7)
    state = _state(tmp_path)
    assert (state["last_step"], state["last"], state["status"]) == (7, None, "aborted")
    with pytest.raises(ValueError, match="not one of"):
        writer.finish("done", "")
    ended = {"finished", "early_stopping", "signal", "alert", "aborted", "save_failed"}
    assert set(END_STATUSES) == ended
    metrics.MetricsWriter(None, tiny_config(), 8, torch.device("cpu")).finish("finished", "")


def test_a_resume_drops_the_end_record_while_it_runs(tmp_path):
    out = tmp_path / "run"
    stopped = _train(out, {"monitoring.alerts": (rule("loss > 0", after_step=4),)}, checkpoint=True)
    assert (stopped.steps_run, _state(out)["status"]) == (4, "alert")
    seen = {}

    class Peek:
        def after_step(self, step, record):
            seen.setdefault(step, json.loads((out / TRAINING_STATE_FILE).read_text()).get("status"))

    _train(out, checkpoint=True, resume_from="latest", hooks=Peek())
    assert seen[5] is None, "a resumed run still says it ended"
    assert _state(out)["status"] == "finished"
