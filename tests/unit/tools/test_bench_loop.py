"""tools/bench_loop.py measures what it says: its core, on a microscopic model, yields real
(positive, finite) throughputs and an overhead computed from them, in JSON-able form.

No speed is asserted (measure, don't assert speed in tests): the numbers on a 1-layer,
hidden-16 model say nothing about the loop's overhead, only that the benchmark runs."""

from __future__ import annotations

import json
import math

import pytest

from tests.unit.trainer.loop_support import (
    loop_config,
    one_thread,  # noqa: F401 - autouse fixture
)
from tools import bench_loop
from trainer.config.in_code import with_values


def _microscopic(warmup: int, steps: int):
    return loop_config(
        {
            "training.max_steps": warmup + steps,
            "training.gradient_accumulation": 1,
            "data.micro_batch": 2,
            "data.seq_len": 8,
        }
    )


def _positive_finite(value: object) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_bench_loop_core_reports_real_numbers(tmp_path):
    warmup, steps = 1, 2
    result = bench_loop.run_benchmark(
        _microscopic(warmup, steps), warmup=warmup, steps=steps, repeats=1, threads=1
    )
    for side in ("loop", "bare"):
        rates = result[side]["tokens_per_s"]
        assert len(rates) == 1
        assert all(_positive_finite(r) for r in rates), rates
        assert _positive_finite(result[side]["tokens_per_s_median"])
        assert all(math.isfinite(x) for x in result[side]["final_loss"])
    assert _positive_finite(result["loop"]["reported_tokens_per_s_median"])
    expected = 1 - result["loop"]["tokens_per_s_median"] / result["bare"]["tokens_per_s_median"]
    assert result["overhead"] == pytest.approx(expected)
    assert math.isfinite(result["overhead"]) and result["overhead"] < 1
    assert result["paired_overhead"] == [pytest.approx(expected)]  # one repeat: one pair
    assert result["paired_overhead_median"] == pytest.approx(expected)
    assert result["relative_spread"] == {"loop": 0.0, "bare": 0.0}  # one run per side
    assert result["target_met"] is (result["overhead"] <= result["overhead_target"])
    assert result["overhead_target"] == 0.05
    workload = result["workload"]
    assert (workload["timed_steps"], workload["warmup_steps_untimed"]) == (steps, warmup)
    assert workload["repeats"] == 1 and workload["tokens_per_step"] == 2 * 8
    assert workload["deterministic_algorithms"] is True  # what the loop runs under on CPU
    assert result["machine"]["torch_threads"] == 1
    assert result["machine"]["cpu_count"] >= 1
    mfu = result["gpu_mfu"]
    assert mfu["measured"] is False and mfu["reason"]
    # Evidence is JSON: no NaN/inf may hide in it.
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result, allow_nan=False))
    assert json.loads(path.read_text())["overhead"] == result["overhead"]


@pytest.mark.parametrize(
    ("values", "warmup", "steps", "message"),
    [
        ({"training.gradient_accumulation": 2}, 1, 2, "gradient_accumulation is 2"),
        ({}, 2, 2, "warmup 2 \\+ steps 2 = 4 is past the config's training.max_steps 3"),
        ({}, 0, 3, "warmup must be >= 1"),
    ],
)
def test_bench_loop_refuses_a_workload_it_cannot_compare(values, warmup, steps, message):
    base = with_values(_microscopic(1, 2), values)
    with pytest.raises(ValueError, match=message):
        bench_loop.run_benchmark(base, warmup=warmup, steps=steps, repeats=1, threads=1)
