"""tools/gpu_bench.py on a CPU with the tiny preset: both sides take the same steps of the
same model (their first losses agree, and a twin with other weights is refused), the
numbers it reports add up, and without CUDA a GPU run is refused writing nothing."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tools import gpu_bench
from trainer.model.config import preset
from trainer.model.llama import build_model
from trainer.plan.flops import flops_per_token
from trainer.train import optim

pytest.importorskip("transformers")

TINY = ["--device", "cpu", "--preset", "tiny", "--seq-len", "32", "--micro-batch", "2"]
STEPS, WARMUP = 3, 2


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("tied", [False, True])
def test_the_hf_twin_computes_our_logits(tied):
    cfg = dataclasses.replace(preset("tiny"), tie_word_embeddings=tied)
    ours = build_model(cfg, seed=3)
    theirs = gpu_bench.hf_twin(ours, cfg, torch.device("cpu"))
    ids = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        difference = (ours(ids) - theirs(ids)).abs().max().item()
    assert difference < 1e-5, f"HF's model with our weights differs by {difference:.3g}"


def test_hf_gets_the_optimizer_groups_ours_gets():
    cfg = preset("tiny")
    ours = build_model(cfg, seed=0)
    theirs = gpu_bench.hf_twin(ours, cfg, torch.device("cpu"))
    hyper = gpu_bench.load_config(gpu_bench.HYPERPARAMETERS).optimizer
    adamw = gpu_bench.adamw_like_ours(theirs, ours, hyper)
    expected = optim.param_groups(ours)
    for group in adamw.param_groups:
        shapes = sorted(tuple(p.shape) for p in group["params"])
        assert shapes == sorted(tuple(p.shape) for _, p in expected[group["name"]]), group["name"]
    decay = {g["name"]: g["weight_decay"] for g in adamw.param_groups}
    assert decay == {optim.DECAY: hyper.weight_decay, optim.NO_DECAY: 0.0}


def test_on_a_cpu_both_sides_take_the_same_steps_and_the_numbers_add_up(tmp_path, fresh_dynamo):
    out = tmp_path / "bench.json"
    argv = [*TINY, "--backend", "aot_eager", "--steps", str(STEPS), "--warmup", str(WARMUP)]
    assert gpu_bench.main([*argv, "--peak-flops", "1e12", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    per_token = flops_per_token(preset("tiny"), 32)
    assert result["flops_per_token"] == per_token
    assert result["shape"]["tokens_per_step"] == 2 * 32
    assert result["compile"] == "aot_eager" and result["precision"] == "bf16"
    assert result["first_losses_agree"]
    for side in gpu_bench.SIDES:
        s = result["sides"][side]
        assert len(s["step_s_each"]) == STEPS, side
        assert s["step_s_median"] == sorted(s["step_s_each"])[STEPS // 2]
        assert s["tokens_per_s"] == pytest.approx(64 / s["step_s_median"])
        assert s["mfu"] == pytest.approx(s["tokens_per_s"] * per_token / 1e12)
        assert s["parameters"] == 158_016, side
        assert s["peak_memory_bytes"] is None, "no CUDA: no peak memory is claimed"
        assert s["first_loss"] != s["last_loss"], f"{side}: the steps did not train"
    ours, theirs = result["sides"]["ours"], result["sides"]["hf"]
    assert ours["first_loss"] == pytest.approx(theirs["first_loss"], rel=2e-2)
    assert result["ours_over_hf_tokens_per_s"] == pytest.approx(
        ours["tokens_per_s"] / theirs["tokens_per_s"]
    )
    assert result["goals"]["mfu_at_least_45_percent"] == (ours["mfu"] >= 0.45)
    assert result["device"] == "cpu" and "git" in result


def test_a_twin_that_is_not_the_same_model_is_refused(tmp_path, monkeypatch, capsys):
    real_twin = gpu_bench.hf_twin

    def other_weights(ours, cfg, device):
        twin = real_twin(ours, cfg, device)
        with torch.no_grad():
            twin.hf.lm_head.weight.mul_(3.0)
        return twin

    monkeypatch.setattr(gpu_bench, "hf_twin", other_weights)
    out = tmp_path / "bench.json"
    argv = [*TINY, "--no-compile", "--steps", "1", "--warmup", "1", "--out", str(out)]
    assert gpu_bench.main(argv) == 1
    assert "not the same model" in capsys.readouterr().err
    assert json.loads(out.read_text())["first_losses_agree"] is False


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_it_refuses_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert gpu_bench.main(["--out", str(out)]) == 2
    assert not out.exists()
    assert "CUDA is not available" in capsys.readouterr().err


def test_a_sequence_longer_than_the_model_is_refused(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["--device", "cpu", "--preset", "tiny", "--seq-len", "257", "--out", str(out)]
    assert gpu_bench.main(argv) == 2
    assert not out.exists()
    assert "exceeds the tiny model's 256 positions" in capsys.readouterr().err


def test_ours_alone_with_a_profile_reports_where_the_time_went(tmp_path, fresh_dynamo):
    out, table = tmp_path / "bench.json", tmp_path / "profile.txt"
    argv = [*TINY, "--backend", "aot_eager", "--steps", "2", "--warmup", "1", "--sides", "ours"]
    assert gpu_bench.main([*argv, "--profile", str(table), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["sides"]) == {"ours"}
    assert result["ours_over_hf_tokens_per_s"] is None and result["first_losses_agree"] is None
    assert result["goals"]["faster_than_hf"] is None
    profile = result["sides"]["ours"]["profile"]
    assert profile["steps"] == 3 and profile["table"] == table.name
    assert "aten::" in table.read_text()
    groups = profile["seconds_by_group"]
    assert groups["matrix products"] > 0, groups  # a CPU's aten::mm counts as one
    assert profile["seconds_total"] == pytest.approx(sum(groups.values()))
    assert not any(k["name"].startswith("Optimizer.") for k in profile["top_kernels"])


@pytest.mark.parametrize(
    ("kernel", "group"),
    [
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "matrix products"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matrix products"),
        ("aten::mm", "matrix products"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26", "attention"),
        (
            "void at::native::multi_tensor_apply_kernel<FusedOptimizerTensorListMetadata>",
            "optimizer",
        ),
        ("triton_poi_fused__unsafe_view_mul_silu_silu_backward_view_4", "compiled fusions"),
        ("void at::native::cunn_SoftMaxForward<4, float>", "other"),
    ],
)
def test_kernels_are_grouped_by_what_they_do(kernel, group):
    assert gpu_bench.kernel_group(kernel) == group


def test_hf_gets_the_adamw_implementation_ours_gets(tmp_path, fresh_dynamo):
    out = tmp_path / "bench.json"
    argv = [*TINY, "--no-compile", "--steps", "1", "--warmup", "1", "--out", str(out)]
    assert gpu_bench.main(argv) == 0
    sides = json.loads(out.read_text())["sides"]
    # the fused kernel, as optim.build_adamw gives ours on a CPU too
    assert sides["ours"]["adamw_fused"] is sides["hf"]["adamw_fused"] is True
