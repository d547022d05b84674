"""The CPU roofline (trainer/plan/roofline.py): the measured float32 matmul peak is cached
per machine key, a bad cache file is measured over and rewritten, never a traceback; a CPU
run's metrics records carry peak_fraction = model FLOP/s / that peak, and the pipeline
summary's training line gives the median step's share of it.

    .venv/bin/pytest -q tests/unit/trainer/test_roofline.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.unit.trainer.loop_support import tiny_config
from trainer.pipeline import summary
from trainer.plan import roofline
from trainer.plan.flops import flops_per_token
from trainer.runfiles.names import PipelineDir
from trainer.store.rundir import read_metric_rows
from trainer.train import metrics

CPU = torch.device("cpu")
KEY = {"cpu": "Test CPU 9000", "logical_cpus": 2, "torch_threads": 2, "torch": "2.x"}


class FakeMeasure:
    """A calibration that returns ``rate`` and counts its calls."""

    def __init__(self, rate: float = 1.9e11, size: int = 1024) -> None:
        self.rate, self.size, self.calls = rate, size, 0

    def __call__(self) -> tuple[float, int]:
        self.calls += 1
        return self.rate, self.size


# ---------------------------------------------------------------- the cache
def test_a_miss_measures_and_caches_and_a_hit_reads_the_cache(tmp_path):
    path = tmp_path / "cache" / "matmul-peak.json"
    measure = FakeMeasure()
    first = roofline.matmul_peak(path=path, key=KEY, measure=measure)
    assert (first.flops_per_second, first.size, first.cached, measure.calls) == (
        1.9e11,
        1024,
        False,
        1,
    )
    assert str(first) == "190 GFLOP/s"
    data = json.loads(path.read_text())
    assert data["version"] == roofline.CACHE_VERSION
    (entry,) = data["entries"].values()
    assert entry["flops_per_second"] == 1.9e11 and entry["key"] == KEY
    again = roofline.matmul_peak(path=path, key=KEY, measure=FakeMeasure(rate=1.0))
    assert (again.flops_per_second, again.cached) == (1.9e11, True)


def test_another_machine_key_is_a_miss_and_both_entries_are_kept(tmp_path):
    path = tmp_path / "matmul-peak.json"
    roofline.matmul_peak(path=path, key=KEY, measure=FakeMeasure())
    more_threads = KEY | {"torch_threads": 1}
    measure = FakeMeasure(rate=1e11)
    peak = roofline.matmul_peak(path=path, key=more_threads, measure=measure)
    assert (peak.flops_per_second, peak.cached, measure.calls) == (1e11, False, 1)
    assert len(json.loads(path.read_text())["entries"]) == 2
    assert roofline.matmul_peak(path=path, key=KEY, measure=FakeMeasure(2.0)).cached


CORRUPT = {
    "not json": b"{torn",
    "not utf-8": b"\xff\xfe\x00",
    "a list": b"[]",
    "another version": json.dumps({"version": 99, "entries": {}}).encode(),
    "no entries": json.dumps({"version": 1}).encode(),
    "negative rate": json.dumps(
        {"version": 1, "entries": {"k": {"flops_per_second": -1.0, "size": 512}}}
    ).encode(),
    "rate as text": json.dumps(
        {"version": 1, "entries": {"k": {"flops_per_second": "NaN", "size": 512}}}
    ).encode(),
    "boolean size": json.dumps(
        {"version": 1, "entries": {"k": {"flops_per_second": 1e9, "size": True}}}
    ).encode(),
}


@pytest.mark.parametrize("damage", sorted(CORRUPT))
def test_a_corrupt_cache_is_measured_over_and_rewritten(tmp_path, damage):
    path = tmp_path / "matmul-peak.json"
    path.write_bytes(CORRUPT[damage])
    measure = FakeMeasure()
    peak = roofline.matmul_peak(path=path, key=KEY, measure=measure)
    assert (peak.flops_per_second, peak.cached, measure.calls) == (1.9e11, False, 1)
    data = json.loads(path.read_text())  # rewritten whole: valid again
    assert [e["flops_per_second"] for e in data["entries"].values()] == [1.9e11]
    assert roofline.matmul_peak(path=path, key=KEY, measure=FakeMeasure(1.0)).cached


def test_a_cache_that_cannot_be_read_or_written_costs_the_cache_not_the_run(tmp_path):
    directory = tmp_path / "matmul-peak.json"
    directory.mkdir()  # a directory where the file should be
    peak = roofline.matmul_peak(path=directory, key=KEY, measure=FakeMeasure())
    assert (peak.flops_per_second, peak.cached) == (1.9e11, False)
    under_a_file = tmp_path / "file"
    under_a_file.write_text("x")
    peak = roofline.matmul_peak(path=under_a_file / "m.json", key=KEY, measure=FakeMeasure())
    assert peak.flops_per_second == 1.9e11


def test_the_cache_lives_where_the_environment_says(tmp_path, monkeypatch):
    monkeypatch.setenv(roofline.CACHE_ENV, str(tmp_path / "override"))
    assert roofline.cache_path() == tmp_path / "override" / "matmul-peak.json"
    monkeypatch.delenv(roofline.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert roofline.cache_path() == tmp_path / "xdg" / "shipgate" / "matmul-peak.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert roofline.cache_path() == tmp_path / "home" / ".cache" / "shipgate" / "matmul-peak.json"


def test_the_machine_key_names_the_cpu_its_threads_and_torch():
    key = roofline.machine_key()
    assert key["cpu"] and key["logical_cpus"] >= 1
    assert key["torch_threads"] == torch.get_num_threads() and key["torch"] == torch.__version__


def test_a_real_calibration_gives_a_positive_rate_at_one_of_its_sizes():
    rate, size = roofline.measure_peak((64, 128), repeats=2)
    assert rate > 0 and math.isfinite(rate) and size in (64, 128)


# ---------------------------------------------------------------- metrics records
def record(writer: metrics.MetricsWriter, tokens: int = 4096, seconds: float = 0.5) -> dict:
    return writer.step_record(
        1, epoch=0, loss=3.0, lr=1e-3, grad_norm=1.0, tokens=tokens, seconds=seconds
    )


def test_a_cpu_record_carries_its_share_of_the_matmul_peak():
    writer = metrics.MetricsWriter(None, tiny_config(), 8, CPU, progress=None, matmul_peak=1e9)
    rec = record(writer, tokens=4096, seconds=0.5)
    assert "peak_fraction" in rec
    expected = 4096 / 0.5 * flops_per_token(tiny_config(), 8) / 1e9
    assert rec["peak_fraction"] == pytest.approx(expected, rel=1e-12)
    assert "mfu" not in rec


def test_a_run_writer_calibrates_once_at_its_start_and_writes_peak_fraction(tmp_path, monkeypatch):
    calls = []

    def fake_peak():
        calls.append(1)
        return roofline.MatmulPeak(2e9, 512, KEY, cached=False)

    monkeypatch.setattr(metrics, "measured_matmul_peak", fake_peak)
    writer = metrics.MetricsWriter(tmp_path / "run", tiny_config(), 8, CPU, progress=None)
    assert calls == [1] and writer.matmul_peak == 2e9
    for step in (1, 2):
        writer.write(record(writer) | {"step": step}, last_step=2)
    writer.close()
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    expected = 4096 / 0.5 * flops_per_token(tiny_config(), 8) / 2e9
    assert [x["peak_fraction"] for x in lines] == pytest.approx([expected, expected])
    assert calls == [1], "calibrated once, not per step"
    assert metrics.read_metrics(tmp_path / "run" / "metrics.jsonl")[0]["peak_fraction"] > 0
    # The run store keeps it in the row's extra JSON (no column of its own).
    rows = read_metric_rows(tmp_path / "run" / "metrics.jsonl")
    assert [json.loads(row[-1])["peak_fraction"] for row in rows] == pytest.approx(
        [expected, expected]
    )


def test_a_writer_that_keeps_no_records_does_not_calibrate(monkeypatch):
    monkeypatch.setattr(metrics, "measured_matmul_peak", lambda: pytest.fail("calibrated"))
    writer = metrics.MetricsWriter(None, tiny_config(), 8, CPU, progress=None)
    assert "peak_fraction" not in record(writer)


# ---------------------------------------------------------------- the pipeline summary
def write_metrics(run_dir: Path, records: list[dict]) -> None:
    train = PipelineDir(run_dir).train
    train.root.mkdir(parents=True)
    train.metrics.write_text("".join(json.dumps(r) + "\n" for r in records))


def run_config():
    return SimpleNamespace(
        model=tiny_config(), data=SimpleNamespace(seq_len=8), training=SimpleNamespace(max_steps=3)
    )


def test_the_summary_gives_the_median_steps_share_of_the_matmul_peak(tmp_path):
    per_token = flops_per_token(tiny_config(), 8)
    peak = 190e9
    speeds = [13_028.0, 9_000.0, 14_000.0]  # median 13,028 tokens/s
    records = [
        {
            "step": i + 1,
            "loss": 3.0 - i / 10,
            "tokens_per_s": speed,
            "step_s": 0.1,
            "peak_fraction": speed * per_token / peak,
        }
        for i, speed in enumerate(speeds)
    ]
    write_metrics(tmp_path, records)
    training = summary._training(tmp_path, run_config())
    assert training["median_peak_fraction"] == pytest.approx(13_028 * per_token / peak)
    assert training["matmul_peak_flops"] == pytest.approx(peak)
    percent = 13_028 * per_token / peak * 100
    shown = f"{percent:.0f}" if percent >= 10 else f"{percent:.1f}"
    assert summary._speed(training) == (
        f"; 13,028 tokens/s median, {shown} % of this CPU's measured float32 matmul peak "
        "(190 GFLOP/s)"
    )


def test_the_summary_line_reads_as_the_issue_asks():
    training = {
        "median_tokens_per_s": 13_028.0,
        "median_peak_fraction": 0.26,
        "matmul_peak_flops": 190e9,
    }
    assert summary._speed(training) == (
        "; 13,028 tokens/s median, 26 % of this CPU's measured float32 matmul peak (190 GFLOP/s)"
    )
    assert summary._speed(training | {"median_peak_fraction": 0.004}).startswith(
        "; 13,028 tokens/s median, 0.4 % of"
    )


def test_a_run_without_peak_fraction_keeps_the_old_training_line(tmp_path):
    write_metrics(tmp_path, [{"step": 1, "loss": 3.0, "tokens_per_s": 500.0, "step_s": 0.1}])
    training = summary._training(tmp_path, run_config())
    assert training["median_peak_fraction"] is None
    assert summary._speed(training) == "; 500 tokens/s median"
