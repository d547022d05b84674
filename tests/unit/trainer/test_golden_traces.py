"""The golden traces (tests/golden/traces.py): two fixed CPU runs give, step for step, the
committed loss, gradient norm, learning rate, validation loss, epoch and data indices -
straight through and across a resume. A changed number is a changed behaviour: regenerate
with `python -m tests.golden.traces --write` only when the change is meant, and say why."""

from __future__ import annotations

import json
import math
import warnings

import pytest

from tests.golden import traces

#: Fields every platform must reproduce exactly (pure Python arithmetic and integer data).
EXACT = ("step", "epoch", "lr", "indices")
#: Float32 model outputs: bitwise on the recorded torch build and CPU kernel family.
MEASURED = ("loss", "grad_norm", "val_loss")
CROSS_PLATFORM_RTOL = 1e-4


def committed(name: str) -> dict:
    return json.loads(traces.trace_file(name).read_text(encoding="utf-8"))


def differences(expected: list[dict], actual: list[dict], *, exact: bool) -> list[str]:
    """Every step and field where ``actual`` departs from ``expected``."""
    found = []
    if len(actual) != len(expected):
        found.append(f"{len(actual)} steps, expected {len(expected)}")
    for want, got in zip(expected, actual, strict=False):
        if set(want) != set(got):
            found.append(f"step {want['step']}: fields {sorted(got)}, expected {sorted(want)}")
            continue
        for key in want:
            if key in MEASURED and not exact:
                a, b = float.fromhex(want[key]), float.fromhex(got[key])
                same = math.isclose(a, b, rel_tol=CROSS_PLATFORM_RTOL)
            else:
                same = want[key] == got[key]
            if not same:
                found.append(f"step {want['step']} {key}: {got[key]}, expected {want[key]}")
    return found


@pytest.fixture(scope="module", params=sorted(traces.SPECS))
def golden(request) -> tuple[str, dict, bool]:
    name = request.param
    doc = committed(name)
    same_platform = doc["platform"] == traces.platform()
    if not same_platform:
        warnings.warn(
            f"golden trace {name!r} was recorded on {doc['platform']}, this is "
            f"{traces.platform()}: loss, grad norm and val loss compared at rel "
            f"{CROSS_PLATFORM_RTOL}, the rest exactly",
            stacklevel=1,
        )
    return name, doc, same_platform


def test_the_committed_trace_spans_two_epoch_boundaries_and_a_resume(golden):
    name, doc, _ = golden
    steps = doc["steps"]
    assert [s["step"] for s in steps] == list(range(1, traces.SPECS[name].steps + 1))
    assert len({s["epoch"] for s in steps}) >= 3, "fewer than two epoch boundaries"
    assert 1 <= doc["resume_after"] < len(steps)
    assert any("val_loss" in s for s in steps), "no evaluation step in the trace"


def test_a_straight_run_reproduces_the_golden_trace(golden):
    name, doc, same_platform = golden
    found = differences(doc["steps"], traces.record(name, resume=False), exact=same_platform)
    assert not found, f"{name}: the run departs from tests/golden/{name}.json:\n" + "\n".join(
        found[:20]
    )


def test_a_resumed_run_reproduces_the_golden_trace(golden):
    name, doc, same_platform = golden
    found = differences(doc["steps"], traces.record(name, resume=True), exact=same_platform)
    assert not found, (
        f"{name}: stopped after step {doc['resume_after']} and resumed, the run departs "
        f"from tests/golden/{name}.json:\n" + "\n".join(found[:20])
    )


def test_the_comparison_sees_a_one_ulp_change():
    """The net itself: the compare must flag the smallest change of any field."""
    steps = committed("tiny")["steps"]
    for key in ("loss", "grad_norm", "lr"):
        changed = [dict(s) for s in steps]
        value = float.fromhex(changed[3][key])
        changed[3][key] = math.nextafter(value, math.inf).hex()
        assert differences(steps, changed, exact=True) == [
            f"step 4 {key}: {changed[3][key]}, expected {steps[3][key]}"
        ]
    shifted = [dict(s) for s in steps]
    shifted[5]["indices"] = shifted[5]["indices"][::-1]
    assert len(differences(steps, shifted, exact=False)) == 1
    assert differences(steps, steps[:-1], exact=True) == [
        f"{len(steps) - 1} steps, expected {len(steps)}"
    ]
    assert differences(steps, [dict(s) for s in steps], exact=True) == []
