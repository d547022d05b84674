"""tools/bench_bpe.py's schedule: runs alternate between the trainers, and a trainer given
fewer runs (the naive reference, ~100x slower) takes its runs in the first rounds."""

from __future__ import annotations

import pytest

from tools import bench_bpe


@pytest.fixture
def order(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    ran: list[str] = []

    def fake_run(kind: str, spec: dict) -> dict:
        ran.append(kind)
        seconds = {"fast": 1.0, "reference": 100.0}[kind] + len(ran) / 1000
        return {"seconds": seconds, "peak_rss_bytes": 1, "peak_rss_parts": {},
                "merges": 5, "merges_sha256": "same"}  # fmt: skip

    monkeypatch.setattr(bench_bpe, "run_isolated", fake_run)
    return ran


def test_runs_alternate_and_each_kind_gets_its_count(order: list[str]):
    result = bench_bpe.compare(["fast", "reference"], {}, 3, {"reference": 1})
    assert order == ["fast", "reference", "fast", "fast"]
    assert len(result["fast"]["seconds"]) == 3 and len(result["reference"]["seconds"]) == 1
    assert result["fast"]["seconds_median"] == pytest.approx(1.003)  # the middle of three
    assert result["reference"]["seconds_median"] == pytest.approx(100.002)


def test_without_fewer_runs_every_kind_runs_repeats_times(order: list[str]):
    bench_bpe.compare(["fast", "reference"], {}, 2)
    assert order == ["fast", "reference", "fast", "reference"]


def test_fewer_than_one_reference_run_is_refused(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as refused:
        bench_bpe.main(["speedup", "--reference-repeats", "0"])
    assert refused.value.code == 2
    assert "--reference-repeats must be at least 1" in capsys.readouterr().err
