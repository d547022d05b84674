"""The plan's time estimate (trainer/plan/timing.py): the fit recovers known costs, the
measured shapes stay within the FLOP budget, and a real measurement gives positive
numbers with its basis. Speed itself is not asserted."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from trainer.config.load import load_config
from trainer.model.config import preset
from trainer.plan import flops, roofline, sections, timing
from trainer.plan.timing import Shape

REPO = Path(__file__).resolve().parents[3]


def synthetic_seconds(cfg, small, large, *, c0, c1, rate):
    def t(layers, shape):
        return c0 + layers * c1 + timing.model_flops(cfg, layers, shape) / rate

    return {"A": t(1, small), "B": t(2, small), "C": t(1, large)}


@pytest.mark.parametrize("name", ["tiny", "50m", "370m"])
def test_fit_recovers_fixed_costs_and_rate_from_the_three_cells(name):
    cfg = preset(name)
    small, large = timing.measured_shapes(cfg, 4, 256)
    seconds = synthetic_seconds(cfg, small, large, c0=0.25, c1=0.004, rate=3e10)
    c0, c1, rate, notes = timing.fit(cfg, small, large, seconds)
    assert c0 == pytest.approx(0.25, rel=1e-6)
    assert c1 == pytest.approx(0.004, rel=1e-6)
    assert rate == pytest.approx(3e10, rel=1e-6)
    assert notes == []


def test_fit_clamps_what_timing_noise_makes_negative_and_says_so():
    cfg = preset("tiny")
    small, large = Shape(1, 64), Shape(4, 64)
    seconds = {"A": 0.010, "B": 0.009, "C": 0.030}  # B < A: a noisy second layer
    c0, c1, rate, notes = timing.fit(cfg, small, large, seconds)
    assert c1 == 0.0 and c0 >= 0.0 and rate > 0
    assert any("c1 fitted" in note for note in notes)


def test_measured_shapes_fit_the_flop_budget_and_keep_the_configured_shape_when_cheap():
    quick = dataclasses.replace(preset("tiny"), vocab_size=8192)
    small, large = timing.measured_shapes(quick, 16, 256)
    assert large.seq_len == 256 and large.batch < 16  # fewer sequences, whole ones
    assert timing.model_flops(quick, 1, large) <= timing.PASS_FLOP_BUDGET
    assert timing.model_flops(quick, 1, Shape(large.batch + 1, 256)) > timing.PASS_FLOP_BUDGET
    assert large.tokens == timing.SHAPE_RATIO * small.tokens
    # A 50257-row lm_head needs more tokens than the budget allows to leave the
    # memory-bound regime: the floor wins.
    _, large = timing.measured_shapes(preset("370m"), 4, 1024)
    assert large.tokens == timing.MIN_LARGE_TOKENS
    cheap = dataclasses.replace(preset("tiny"), vocab_size=512)
    small, large = timing.measured_shapes(cheap, 2, 64)
    assert large == Shape(2, 64)  # the whole configured micro-batch
    assert small.tokens == 128 // timing.SHAPE_RATIO


def test_attention_flops_grow_with_the_square_of_seq_len():
    cfg = preset("tiny")
    one = timing.layer_flops(cfg, Shape(1, 64))
    assert timing.layer_flops(cfg, Shape(2, 64)) == 2 * one  # more sequences: linear
    q = cfg.num_attention_heads * cfg.resolved_head_dim
    longer = timing.layer_flops(cfg, Shape(1, 128)) - 2 * one  # longer ones: the T^2 term
    assert longer == 3 * 2 * (128**2 - 2 * 64**2) * q


# bf16 is planned for CUDA; CPU autocast runs the same code path here.
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_measurement_on_the_tiny_model_gives_positive_times_and_its_basis(precision):
    cfg = dataclasses.replace(preset("tiny"), vocab_size=1000)
    est = timing.measure(
        cfg,
        micro_batch=4,
        seq_len=64,
        grad_accum=3,
        steps=100,
        optimizer={"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1},
        precision=precision,
    )
    assert est.precision == precision and 1 <= est.passes <= timing.TIMED_PASSES
    assert set(est.seconds) == {"A", "B", "C"} and all(s > 0 for s in est.seconds.values())
    assert est.micro_batch_seconds > 0 and est.optimizer_seconds > 0
    assert est.step_seconds == pytest.approx(3 * est.micro_batch_seconds + est.optimizer_seconds)
    assert est.run_seconds == pytest.approx(100 * est.step_seconds)
    basis = "\n".join(est.basis())
    assert "1 and 2 layers" in basis and "GFLOP/s" in basis and str(est.small) in basis


# ---------------------------------------------------------------- noise (fake clock)
class FakeClock:
    """A clock that only a pass moves: each ``run()`` takes the next scripted duration."""

    def __init__(self, durations):
        self.now = 0.0
        self.durations = list(durations)
        self.runs = 0

    def clock(self) -> float:
        return self.now

    def run(self) -> None:
        self.now += self.durations[self.runs]
        self.runs += 1


def timed(durations, passes=3, **kwargs) -> tuple[timing.Passes, FakeClock]:
    fake = FakeClock(durations)
    return timing.time_passes(fake.run, passes, clock=fake.clock, **kwargs), fake


def test_consistent_passes_are_timed_once_each_and_reported_with_their_spread():
    passes, fake = timed([0.042, 0.044, 0.043, 9.9, 9.9])
    assert fake.runs == 3 and passes.seconds == pytest.approx((0.042, 0.044, 0.043))
    extremes = (passes.fastest, passes.median, passes.slowest)
    assert extremes == pytest.approx((0.042, 0.043, 0.044))
    assert passes.spread == pytest.approx(0.044 / 0.042 - 1)
    assert str(passes) == "42.0 ms / 43.0 ms / 44.0 ms min/median/max of 3"
    assert (
        passes.as_dict()["max"] == pytest.approx(0.044)
        and passes.as_dict()["spread"] < timing.SPREAD_TARGET
    )
    assert not passes.noisy and timing.noise_verdict({"A": passes}) is None
    jitter = timing.Passes((0.0006, 0.0010, 0.0011))  # 67 % apart, but 0.4 ms
    assert jitter.median_spread > timing.NOISY_SPREAD and not jitter.noisy


def test_disagreeing_passes_take_more_passes_and_one_slow_pass_does_not_make_the_estimate():
    quiet = [0.103, 0.098, 0.101, 0.104, 0.102, 0.099, 0.101, 0.100]
    passes, fake = timed([0.100, 1.5, *quiet])  # one 1.5 s pass: another process ran
    assert fake.runs > 3, "the passes disagreed: more must be timed"
    assert fake.runs <= timing.MAX_PASSES
    assert passes.slowest == 1.5 and passes.median < 0.105  # the median shrugs it off
    assert not passes.noisy
    assert timing.noise_verdict({"A": passes, "B": timed([0.1, 0.1, 0.1])[0]}) is None


def test_more_passes_stop_at_the_pass_bound_and_at_the_time_bound():
    alternating = [0.01, 0.1] * 100
    passes, fake = timed(alternating)
    assert fake.runs == timing.MAX_PASSES and len(passes.seconds) == timing.MAX_PASSES
    slow = [1.0, 2.0] * 20
    passes, fake = timed(slow, seconds_limit=4.0)
    assert fake.runs == 3  # 1 + 2 + 1 = 4 s: no fourth pass


def test_wildly_disagreeing_passes_are_too_noisy_for_an_estimate():
    passes, _ = timed([0.042, 1.5, 0.9, 0.3, 1.2, 0.05, 1.1, 0.7, 1.4])
    assert passes.noisy
    verdict = timing.noise_verdict({"A": timed([0.05, 0.05, 0.05])[0], "C": passes})
    assert verdict is not None
    assert verdict.startswith("the machine is too noisy for an estimate: passes ranged ")
    assert "42.0 ms..1.5 s (cell C" in verdict


def test_cells_in_an_order_the_work_contradicts_are_too_noisy_too():
    # Each cell's passes agree, but the 1-layer cell A took longer than the 2-layer B: a
    # loaded machine slowed each cell by a different amount, and the fit means nothing.
    cells = consistent_cells() | {
        "A": timing.Passes((0.938, 0.967)),
        "B": timing.Passes((0.130, 0.135, 0.131)),
    }
    estimate = fake_estimate(cells)
    assert timing.noise_verdict(cells) is None
    assert estimate.too_noisy == (
        "the machine is too noisy for an estimate: cell B (2 layers instead of 1) took "
        "131 ms, less than cell A's 952 ms"
    )
    assert fake_estimate(consistent_cells()).too_noisy is None
    # within SPREAD_TARGET, a B a little under A is timing jitter, not noise
    near = consistent_cells() | {"B": timing.Passes((0.019, 0.019, 0.019))}
    assert fake_estimate(near).too_noisy is None


def fake_estimate(cell_passes: dict[str, timing.Passes]) -> timing.TimingEstimate:
    seconds = {k: p.median for k, p in cell_passes.items() if k in "ABC"}
    return timing.TimingEstimate(
        device="cpu",
        precision="fp32",
        threads=2,
        passes=3,
        small=Shape(2, 256),
        large=Shape(8, 256),
        seconds=seconds,
        fixed_seconds=0.01,
        layer_fixed_seconds=0.001,
        flops_per_second=5e10,
        micro_batch_seconds=0.198,
        optimizer_seconds=0.002,
        step_seconds=0.2,
        run_seconds=0.2 * 600,
        notes=(),
        cell_passes=cell_passes,
    )


def consistent_cells() -> dict[str, timing.Passes]:
    return {
        "A": timing.Passes((0.020, 0.021, 0.020)),
        "C": timing.Passes((0.042, 0.043, 0.044)),
        "B": timing.Passes((0.030, 0.031, 0.030)),
        "AdamW": timing.Passes((0.001, 0.001, 0.001)),
    }


def quickstart_time_section(monkeypatch, estimate, peak=190e9, load=(0.3, 2)):
    monkeypatch.setattr(sections.timing, "machine_load", lambda: load)
    monkeypatch.setattr(sections.timing, "measure", lambda *a, **k: estimate)
    fake_peak = roofline.MatmulPeak(peak, 1024, {"torch_threads": 2}, cached=True)
    monkeypatch.setattr(roofline, "matmul_peak", lambda: fake_peak)
    cfg = load_config(REPO / "configs" / "quickstart-cpu.yaml")
    return cfg, sections.time_section(cfg, "cpu", sections.CudaInfo(False), None, None)


def test_the_plan_withholds_the_estimate_when_the_machine_is_too_noisy(monkeypatch):
    cells = consistent_cells() | {"C": timing.Passes((0.042, 1.5, 0.9, 0.3, 1.2))}
    _, section = quickstart_time_section(monkeypatch, fake_estimate(cells))
    assert section.verdict == "warn"  # a clean exit, not a FAIL
    message = section.findings[0].message
    assert message.startswith("the machine is too noisy for an estimate: passes ranged 42.0 ms")
    values = section.values
    assert values["too_noisy"] is True and values["noise"] == message
    assert values["run_seconds"] is None and values["step_seconds"] is None
    assert values["cell_passes"]["C"]["max"] == 1.5
    text = "\n".join(section.details)
    assert "run:" not in text and "roofline" not in text  # no made-up number
    assert "C 42.0 ms / 900 ms / 1.5 s min/median/max of 5" in text


def test_the_plan_gives_the_estimate_and_its_roofline_when_the_passes_agree(monkeypatch):
    estimate = fake_estimate(consistent_cells())
    cfg, section = quickstart_time_section(monkeypatch, estimate, peak=190e9)
    assert section.verdict == "ok" and section.values["too_noisy"] is False
    assert section.values["step_seconds"] == 0.2
    tokens = cfg.data.micro_batch * cfg.data.seq_len * cfg.training.gradient_accumulation
    rate = flops.flops_per_token(cfg.model, cfg.data.seq_len) * tokens / 0.2
    assert section.values["model_flops_per_second"] == pytest.approx(rate)
    assert section.values["peak_fraction"] == pytest.approx(rate / 190e9)
    text = "\n".join(section.details)
    assert (
        f"{roofline.percent(rate / 190e9)} of this CPU's measured float32 matmul peak (190 GFLOP/s"
        in text
    )
    assert "run: 1,100 max steps x 200 ms = 2.0 min" in text  # the fake estimate's run time
    assert section.values["load_average"] == 0.3
    assert "above the measured peak" not in text
    _, above = quickstart_time_section(monkeypatch, estimate, peak=rate / 2)
    assert "above the measured peak: the peak was measured while the machine was busy" in (
        "\n".join(above.details)
    )


def test_a_busy_machine_gets_no_number_even_when_its_passes_agree(monkeypatch):
    estimate = fake_estimate(consistent_cells())
    _, section = quickstart_time_section(monkeypatch, estimate, load=(6.6, 2))
    assert section.verdict == "warn" and section.values["step_seconds"] is None
    assert section.values["too_noisy"] is True
    assert section.findings[0].message.startswith(
        "the machine is too busy for an estimate: the 1-minute load average was 6.6 on 2 "
        "logical CPUs when timing started"
    )
    assert "run:" not in "\n".join(section.details)
    _, quiet = quickstart_time_section(monkeypatch, estimate, load=(2.0, 2))
    assert quiet.verdict == "ok" and quiet.findings == []
    _, unknown = quickstart_time_section(monkeypatch, estimate, load=None)
    assert unknown.verdict == "ok" and unknown.values["load_average"] is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [("NVIDIA H100 80GB HBM3", "of the NVIDIA H100 80GB HBM3's datasheet dense bf16 peak (989"),
     ("Some Future GPU", "no datasheet peak known for Some Future GPU: no MFU")],
)  # fmt: skip
def test_a_cuda_plan_gives_the_mfu_against_the_datasheet_peak_when_known(
    monkeypatch, name, expected
):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: name)
    cfg = load_config(REPO / "configs" / "quickstart-cpu.yaml")
    section = sections.Section("time")
    sections._roofline(section, cfg, fake_estimate(consistent_cells()), "cuda")
    rate = section.values["model_flops_per_second"]
    assert expected in section.details[-1]
    if "H100" in name:
        assert section.values["mfu"] == pytest.approx(rate / 989e12)
    else:
        assert section.values["mfu"] is None
