"""The golden traces (tests/golden/traces.py): two fixed CPU runs give, step for step, the
committed loss, gradient norm, learning rate, validation loss, epoch and data indices -
straight through and across a resume. A changed number is a changed behaviour: regenerate
with `python -m tests.golden.traces --write` only when the change is meant, and say why.

Why the comparison holds on any CPU: the traces train in float64 (see traces.py). Step,
epoch, learning rate and data indices are compared exactly: pure Python arithmetic and
integers, the same everywhere. Loss, grad norm and validation loss are compared at a
relative FLOAT_RTOL = 1e-9. Measured on one Intel Xeon (AVX-512) with another CPU's code
paths forced (ATen at AVX2 and scalar, MKL at AVX2; `python -m tests.golden.drift`,
evidence/benchmarks/golden-trace-drift.json), the float64 traces move by at most 3.1e-13
relative; the same runs in float32 move by up to 6.8e-4, which is why the traces are not
float32. Each seeded bug below moves an exact field or a float one; the smallest, a
learning rate applied 1e-6 off the recorded one, moves the loss by 7e-7 relative. The bound
sits 3,000 times above the drift and 700 times below that bug; a float32 trace would need
a bound of about 1e-3, which that bug passes.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable

import pytest

from tests.golden import drift, traces
from trainer.train import checkpointing, loop, optim

#: Fields every platform must reproduce exactly (pure Python arithmetic and integer data).
EXACT = ("step", "epoch", "lr", "indices")
#: float64 model outputs: equal across CPUs up to the kernels' rounding (module docstring).
FLOATS = ("loss", "grad_norm", "val_loss")
FLOAT_RTOL = 1e-9


def committed(name: str) -> dict:
    return json.loads(traces.trace_file(name).read_text(encoding="utf-8"))


def differences(expected: list[dict], actual: list[dict]) -> list[str]:
    """Every step and field where ``actual`` departs from ``expected``: exact fields by
    equality, float fields beyond FLOAT_RTOL."""
    found = []
    if len(actual) != len(expected):
        found.append(f"{len(actual)} steps, expected {len(expected)}")
    for want, got in zip(expected, actual, strict=False):
        if set(want) != set(got):
            found.append(f"step {want['step']}: fields {sorted(got)}, expected {sorted(want)}")
            continue
        for key in want:
            if key in FLOATS:
                a, b = float.fromhex(want[key]), float.fromhex(got[key])
                same = math.isclose(a, b, rel_tol=FLOAT_RTOL, abs_tol=0.0)
            else:
                same = want[key] == got[key]
            if not same:
                found.append(f"step {want['step']} {key}: {got[key]}, expected {want[key]}")
    return found


@pytest.fixture(scope="module", params=sorted(traces.SPECS))
def golden(request) -> tuple[str, dict]:
    return request.param, committed(request.param)


def test_the_committed_trace_spans_two_epoch_boundaries_and_a_resume(golden):
    name, doc = golden
    steps = doc["steps"]
    assert doc["dtype"] == "float64"
    assert [s["step"] for s in steps] == list(range(1, traces.SPECS[name].steps + 1))
    assert len({s["epoch"] for s in steps}) >= 3, "fewer than two epoch boundaries"
    assert 1 <= doc["resume_after"] < len(steps)
    assert any("val_loss" in s for s in steps), "no evaluation step in the trace"
    # float64 for real: a float32 number widened to float64 ends in 29 zero bits.
    assert all(_low_29_bits(s["loss"]) for s in steps), "the losses are float32 numbers"


def _low_29_bits(hexfloat: str) -> int:
    (bits,) = struct.unpack("<Q", struct.pack("<d", float.fromhex(hexfloat)))
    return bits & (2**29 - 1)


def test_a_straight_run_reproduces_the_golden_trace(golden):
    name, doc = golden
    found = differences(doc["steps"], traces.record(name, resume=False))
    assert not found, f"{name}: the run departs from tests/golden/{name}.json:\n" + "\n".join(
        found[:20]
    )


@pytest.mark.slow
def test_a_resumed_run_reproduces_the_golden_trace(golden):
    name, doc = golden
    found = differences(doc["steps"], traces.record(name, resume=True))
    assert not found, (
        f"{name}: stopped after step {doc['resume_after']} and resumed, the run departs "
        f"from tests/golden/{name}.json:\n" + "\n".join(found[:20])
    )


def test_the_comparison_sees_one_ulp_of_an_exact_field_and_rtol_of_a_float_one():
    """The net itself, both sides: any change of an exact field and a float change beyond
    FLOAT_RTOL are flagged; a float change within it is not."""
    steps = committed("tiny")["steps"]
    changed = [dict(s) for s in steps]
    changed[3]["lr"] = math.nextafter(float.fromhex(changed[3]["lr"]), math.inf).hex()
    assert differences(steps, changed) == [
        f"step 4 lr: {changed[3]['lr']}, expected {steps[3]['lr']}"
    ]
    for key in ("loss", "grad_norm", "val_loss"):
        for factor, flagged in ((1 + 2 * FLOAT_RTOL, True), (1 + FLOAT_RTOL / 2, False)):
            changed = [dict(s) for s in steps]
            changed[3][key] = (float.fromhex(changed[3][key]) * factor).hex()
            expected = [f"step 4 {key}: {changed[3][key]}, expected {steps[3][key]}"]
            assert differences(steps, changed) == (expected if flagged else [])
    shifted = [dict(s) for s in steps]
    shifted[5]["indices"] = shifted[5]["indices"][::-1]
    assert len(differences(steps, shifted)) == 1
    assert differences(steps, steps[:-1]) == [f"{len(steps) - 1} steps, expected {len(steps)}"]
    assert differences(steps, [dict(s) for s in steps]) == []


# ---------------------------------------------------------------- the net catches its bugs
def _data_order_changed(patch: pytest.MonkeyPatch) -> None:
    real = loop.epoch_order

    def another_order(num_sequences, *, seed, epoch):
        return real(num_sequences, seed=seed + 1, epoch=epoch)

    patch.setattr(loop, "epoch_order", another_order)


def _order_not_redrawn_at_epoch_boundary(patch: pytest.MonkeyPatch) -> None:
    real = loop.epoch_order
    patch.setattr(loop, "epoch_order", lambda n, *, seed, epoch: real(n, seed=seed, epoch=0))


def _epoch_not_counted(patch: pytest.MonkeyPatch) -> None:
    real = loop._planned_steps

    def steps(config, num_sequences, last_step):
        for plan in real(config, num_sequences, last_step):
            yield plan._replace(epoch=min(plan.epoch, 1))

    patch.setattr(loop, "_planned_steps", steps)


def _step_repeated(patch: pytest.MonkeyPatch) -> None:
    real = loop._planned_steps

    def steps(config, num_sequences, last_step):
        for plan in real(config, num_sequences, last_step):
            yield plan
            if plan.step == 3:
                yield plan  # the same batch trained twice

    patch.setattr(loop, "_planned_steps", steps)


def _step_skipped(patch: pytest.MonkeyPatch) -> None:
    real = loop._planned_steps

    def steps(config, num_sequences, last_step):
        yield from (plan for plan in real(config, num_sequences, last_step) if plan.step != 3)

    patch.setattr(loop, "_planned_steps", steps)


def _warmup_one_step_longer(patch: pytest.MonkeyPatch) -> None:
    real = loop.lr_at
    patch.setattr(loop, "lr_at", lambda step, *, warmup, **kw: real(step, warmup=warmup + 1, **kw))


def _applied_lr_differs_from_recorded_by_1e_6(patch: pytest.MonkeyPatch) -> None:
    """Only the float fields can see this one: the recorded lr is right."""
    real = optim.apply_lr
    patch.setattr(optim, "apply_lr", lambda optimizer, lr: real(optimizer, lr * (1 + 1e-6)))


def _adamw_moments_lost_on_resume(patch: pytest.MonkeyPatch) -> None:
    real = checkpointing.load.load_checkpoint

    def load(path, model, optimizer, **kw):
        state = real(path, model, optimizer, **kw)
        optimizer.state.clear()  # weights kept, AdamW restarts its moments
        return state

    patch.setattr(checkpointing.load, "load_checkpoint", load)


def _adamw_step_count_off_by_one_on_resume(patch: pytest.MonkeyPatch) -> None:
    real = checkpointing.load.load_checkpoint

    def load(path, model, optimizer, **kw):
        state = real(path, model, optimizer, **kw)
        for moments in optimizer.state.values():
            moments["step"] -= 1  # bias correction of one step earlier
        return state

    patch.setattr(checkpointing.load, "load_checkpoint", load)


#: (bug, trace, resumed, the fields it must move first): one per class the traces exist for.
SEEDED_BUGS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], bool, set[str]]] = {
    "data order changed": (_data_order_changed, False, {"indices"}),
    "order not redrawn at an epoch boundary": (
        _order_not_redrawn_at_epoch_boundary,
        False,
        {"indices"},
    ),
    "epoch boundary not counted": (_epoch_not_counted, False, {"epoch"}),
    "a step repeated": (_step_repeated, False, {"steps", "step"}),
    "a step skipped": (_step_skipped, False, {"steps", "step"}),
    "warmup one step longer": (_warmup_one_step_longer, False, {"lr"}),
    "applied lr 1e-6 off the recorded one": (
        _applied_lr_differs_from_recorded_by_1e_6,
        False,
        {"loss", "grad_norm", "val_loss"},
    ),
    "AdamW moments lost on resume": (_adamw_moments_lost_on_resume, True, set(FLOATS)),
    "AdamW step count off by one on resume": (
        _adamw_step_count_off_by_one_on_resume,
        True,
        set(FLOATS),
    ),
}


def _fields(found: list[str]) -> set[str]:
    """The field each difference names ("steps" for a changed number of steps)."""
    named = set()
    for line in found:
        words = line.split()
        named.add("steps" if words[1] == "steps," else words[2].rstrip(":"))
    return named


@pytest.mark.parametrize("bug", sorted(SEEDED_BUGS))
def test_the_tiny_trace_fails_on_a_seeded_bug(bug, monkeypatch):
    """Positive controls: each bug class the traces exist for, seeded into the real loop,
    is a difference at FLOAT_RTOL - and in the field that class moves."""
    seed, resumed, fields = SEEDED_BUGS[bug]
    doc = committed("tiny")
    seed(monkeypatch)
    found = differences(doc["steps"], traces.record("tiny", resume=resumed))
    assert found, f"the tiny trace does not see the seeded bug: {bug}"
    assert _fields(found) & fields, f"{bug}: moved {sorted(_fields(found))}, not {sorted(fields)}"


def test_the_drift_measure_reports_the_largest_relative_change_and_exact_agreement():
    """tests/golden/drift.py, the measurement behind FLOAT_RTOL, on hand-made traces."""
    steps = committed("tiny")["steps"]
    base = {"tiny": {"straight": steps}}
    same = drift.drift(base, {"tiny": {"straight": [dict(s) for s in steps]}})
    assert same == {"max_relative": dict.fromkeys(FLOATS, 0.0), "exact_fields_agree": True}
    moved = [dict(s) for s in steps]
    moved[2]["grad_norm"] = (float.fromhex(moved[2]["grad_norm"]) * (1 + 3e-13)).hex()
    moved[7]["grad_norm"] = (float.fromhex(moved[7]["grad_norm"]) * (1 - 5e-12)).hex()
    found = drift.drift(base, {"tiny": {"straight": moved}})
    assert found["max_relative"]["grad_norm"] == pytest.approx(5e-12, rel=1e-3)
    assert found["max_relative"]["loss"] == 0.0 and found["exact_fields_agree"]
    reordered = [dict(s) for s in steps]
    reordered[4]["indices"] = reordered[4]["indices"][::-1]
    assert not drift.drift(base, {"tiny": {"straight": reordered}})["exact_fields_agree"]
    assert not drift.drift(base, {"tiny": {"straight": steps[:-1]}})["exact_fields_agree"]
