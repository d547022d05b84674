"""tools/bench_store.py measures what it says: both sides timed for every step, the store's
rows counted, and a store that records nothing is a failed benchmark, never a fast one.
No speed is asserted (measure, don't assert speed in tests)."""

from __future__ import annotations

import json
import math

import pytest

from tests.unit.trainer.store_support import write_run
from tools import bench_store
from trainer.store import registry
from trainer.store.recorder import RunRecorder


def test_both_sides_are_timed_and_every_step_is_stored(tmp_path):
    result = bench_store.run_benchmark(20, tmp_path)

    assert result["rows_stored"] == 20
    for side in ("files", "store"):
        s = result[side]
        assert all(math.isfinite(v) and v > 0 for v in s.values()), s
        assert s["median_us"] <= s["p95_us"] <= s["max_us"]
    assert result["store_over_files"] == pytest.approx(
        result["store"]["median_us"] / result["files"]["median_us"]
    )
    json.dumps(result, allow_nan=False)  # evidence is JSON: no NaN/inf hides in it
    assert registry.registered_runs() == [], "the benchmark's run is not the user's"


def test_the_store_is_related_to_a_real_runs_median_step(tmp_path):
    run = write_run(tmp_path / "run", 5)  # step_s 0.128 on every line
    result = bench_store.run_benchmark(4, tmp_path)
    bench_store.against_run(result, run)
    against = result["against_run"]
    assert (against["steps"], against["median_step_s"]) == (5, 0.128)
    assert against["store_fraction_of_step"] == pytest.approx(
        result["store"]["median_us"] / 1e6 / 0.128
    )


def test_a_store_that_records_nothing_fails_the_benchmark(tmp_path, monkeypatch):
    monkeypatch.setattr(RunRecorder, "step", lambda self, record, *, last_step: None)
    with pytest.raises(RuntimeError, match=r"runs\.db: 0 rows for 6 steps"):
        bench_store.run_benchmark(6, tmp_path)
