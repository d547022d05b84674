"""tools/step_profile.py on the tiny preset: the step's GEMMs are exactly the 6 N T of the
FLOP count, kernels are sorted into the right kinds, and the limit is the stated formula."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from tools import step_profile
from trainer.model.config import preset
from trainer.model.llama import build_model
from trainer.plan.flops import matmul_params


@pytest.mark.parametrize("tied", [False, True])
def test_the_step_gemms_are_the_six_n_t_of_the_flop_count(tied):
    cfg = dataclasses.replace(preset("tiny"), tie_word_embeddings=tied)
    model = build_model(cfg, device="meta")
    tokens = 3 * 40
    shapes = step_profile.gemm_shapes(model, tokens)
    assert sum(g.flops * count for g, count in shapes.items()) == 6 * matmul_params(cfg) * tokens
    # forward, dX and dW of every weight: each product has the token count on one side
    assert all(tokens in (g.m, g.k) for g in shapes), shapes
    assert sum(shapes.values()) == 3 * (cfg.num_hidden_layers * 7 + 1)


def test_the_gemms_timed_alone_add_up():
    shapes = step_profile.gemm_shapes(build_model(preset("tiny"), device="meta"), 64)
    rate = step_profile.gemm_rate(shapes, repeats=1)
    assert rate["flops"] == sum(g.flops * c for g, c in shapes.items())
    assert sum(row["count"] for row in rate["shapes"]) == sum(shapes.values())
    assert rate["flops_per_s"] == pytest.approx(rate["flops"] / rate["seconds"])
    assert all(row["gflops"] > 0 for row in rate["shapes"])


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("aten::mm", "matmul"),
        ("aten::addmm", "matmul"),
        ("aten::bmm", "matmul"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention"),
        ("aten::_log_softmax_backward_data", "loss"),
        ("aten::nll_loss_forward", "loss"),
        ("aten::mul", "other"),
        ("aten::matmul", "other"),  # composite: its kernels are counted where they run
        ("aten::_foreach_mul_", "other"),
    ],
)
def test_kernels_are_sorted_by_kind(name, kind):
    assert step_profile.kind_of(name) == kind


def test_the_profile_of_a_step_sees_its_matmuls_and_attention():
    torch.manual_seed(0)
    model = build_model(preset("tiny"), seed=0)
    ids = torch.randint(0, 512, (2, 33))

    stepped = []

    def step():
        started = time.perf_counter()
        model(ids[:, :-1]).sum().backward()
        stepped.append(time.perf_counter() - started)

    seconds = step_profile.op_seconds(step, steps=2)
    elapsed_per_step = sum(stepped) / 2
    assert set(seconds) == set(step_profile.KINDS)
    # self time: a kernel inside a composite op (aten::linear > aten::addmm) counts once
    assert sum(seconds.values()) <= elapsed_per_step, (seconds, elapsed_per_step)
    assert seconds["matmul"] > 0 and seconds["attention"] > 0 and seconds["other"] > 0
    assert seconds["loss"] == 0, "no cross-entropy in this step"


def test_phases_run_in_order_and_only_timed_steps_count():
    calls = []
    phases = {name: (lambda name=name: calls.append(name)) for name in ("a", "b", "c")}
    seconds = step_profile.phase_seconds(phases, steps=3, warmup=2)
    assert calls == ["a", "b", "c"] * 5
    assert set(seconds) == {"a", "b", "c"} and all(s >= 0 for s in seconds.values())


def test_the_limit_is_model_flops_over_counted_kernel_time():
    # 100 GFLOP of GEMMs at 400 GFLOP/s (0.25 s) and 0.25 s of attention: 120 GFLOP in 0.5 s
    share = step_profile.limit(
        model_flops=120e9, gemm_flops=100e9, gemm_flops_per_s=400e9, attention_seconds=0.25,
        peak=480e9,
    )  # fmt: skip
    assert share == pytest.approx(0.5)


def test_the_peak_table_has_every_size_and_thread_count_and_restores_threads():
    before = torch.get_num_threads()
    rows = step_profile.peak_table(sizes=(64, 128), threads=(1, 2), repeats=1)
    assert [(r["size"], r["threads"]) for r in rows] == [(64, 1), (128, 1), (64, 2), (128, 2)]
    assert all(r["gflops"] > 0 for r in rows)
    assert torch.get_num_threads() == before
