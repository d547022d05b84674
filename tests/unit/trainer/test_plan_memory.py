"""The plan's memory budget (trainer/plan/memory.py): the activation estimate is checked
against what autograd really saves for our model, counted with saved_tensors_hooks;
state and checkpoint sizes follow from the parameter count; device memory and sizes are
read as documented."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.model.config import LlamaConfig, preset
from trainer.model.llama import build_model
from trainer.model.params import param_count
from trainer.plan import memory

#: The estimate must lie within this factor of the measured saved-tensor bytes. It is
#: exact for torch 2.13 (fp32 and CPU bf16 autocast); the slack is for kernels that pad
#: their logsumexp or keep an RNG state in other versions.
TOLERANCE = 1.05


def measured_saved_bytes(cfg: LlamaConfig, b: int, t: int, autocast: torch.dtype | None) -> int:
    """Bytes of every distinct storage autograd saves for one forward + cross-entropy,
    parameters excluded (they are the weights item, not activations)."""
    model = build_model(cfg, seed=0)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    ids = torch.randint(0, cfg.vocab_size, (b, t), generator=torch.Generator().manual_seed(0))
    with (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor),
        torch.autocast("cpu", dtype=autocast, enabled=autocast is not None),
    ):
        logits = model(ids)
        loss = F.cross_entropy(logits.view(-1, cfg.vocab_size), ids.view(-1))
    loss.backward()  # the graph is real: what was saved is what backward uses
    return sum(saved.values())


def small_config(layers: int, heads: int, kv_heads: int, head_dim: int, tied: bool) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=300,
        hidden_size=heads * head_dim,
        intermediate_size=3 * heads * head_dim - 8,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
    )


def assert_within(estimate: int, measured: int) -> None:
    assert measured / TOLERANCE <= estimate <= measured * TOLERANCE, (estimate, measured)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_activation_estimate_matches_saved_tensors_of_the_tiny_model(precision):
    cfg = dataclasses.replace(preset("tiny"), vocab_size=1000)
    autocast = None if precision == "fp32" else torch.bfloat16
    measured = measured_saved_bytes(cfg, 2, 32, autocast)
    estimate = memory.saved_activation_bytes(cfg, 2, 32, precision)
    assert_within(estimate, measured)


configs = st.builds(
    lambda layers, kv_heads, group, head_dim, tied: small_config(
        layers, kv_heads * group, kv_heads, head_dim, tied
    ),
    layers=st.integers(1, 3),
    kv_heads=st.sampled_from([1, 2, 4]),
    group=st.sampled_from([1, 2]),
    head_dim=st.sampled_from([8, 16]),
    tied=st.booleans(),
)


@settings(max_examples=12, deadline=None)
@given(
    cfg=configs,
    b=st.integers(1, 3),
    t=st.integers(1, 40),
    autocast=st.sampled_from([None, torch.bfloat16]),
)
def test_activation_estimate_matches_saved_tensors_on_random_configs(cfg, b, t, autocast):
    precision = "fp32" if autocast is None else "bf16"
    assert_within(
        memory.saved_activation_bytes(cfg, b, t, precision),
        measured_saved_bytes(cfg, b, t, autocast),
    )


def test_the_estimate_adds_up_its_items_and_the_state_is_16_bytes_per_parameter():
    cfg = preset("370m")
    p = param_count(cfg)
    est = memory.estimate_memory(cfg, 4, 1024, "fp32")
    assert est.total == sum(item.bytes for item in est.items)
    state = sum(est.item(n).bytes for n in ("weights", "gradients", "adamw_moments"))
    assert state == 16 * p == 16 * 373_509_120
    assert est.item("logits").bytes == 4 * 4 * 1024 * 50257
    assert est.item("cross_entropy_backward").bytes == 2 * 4 * 4 * 1024 * 50257
    # The saved activations plus the saved log-softmax are what the hooks test measures.
    saved = est.item("activations").bytes + est.item("cross_entropy_saved").bytes
    assert saved == memory.saved_activation_bytes(cfg, 4, 1024, "fp32")
    assert all(item.formula for item in est.items)


def test_autocast_halves_activations_and_adds_weight_copies():
    cfg = preset("370m")
    fp32 = memory.estimate_memory(cfg, 4, 1024, "fp32")
    bf16 = memory.estimate_memory(cfg, 4, 1024, "bf16")
    assert bf16.item("activations").bytes < fp32.item("activations").bytes
    assert bf16.item("logits").bytes * 2 == fp32.item("logits").bytes
    copies = bf16.item("autocast_weight_copies").bytes
    assert copies == 2 * (param_count(cfg) - 50257 * 1024 - (2 * 24 + 1) * 1024)
    with pytest.raises(ValueError, match="precision"):
        memory.estimate_memory(cfg, 4, 1024, "fp8")


def test_checkpoint_is_weights_plus_two_adamw_moments_in_float32():
    sizes = memory.checkpoint_bytes(preset("370m"))
    assert sizes == {
        "weights": 4 * 373_509_120,
        "optimizer": 8 * 373_509_120,
        "total": 12 * 373_509_120,
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24GiB", 24 << 30),
        ("24 GiB", 24 << 30),
        ("80GB", 80 * 10**9),
        ("512MiB", 512 << 20),
        ("1.5gib", int(1.5 * (1 << 30))),
        ("1000", 1000),
    ],
)
def test_sizes_parse_binary_and_decimal_units(text, expected):
    assert memory.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "24 parsecs", "-1GiB", "0", "24GiBB"])
def test_bad_sizes_are_refused_with_an_example(text):
    with pytest.raises(ValueError, match=r"24GiB|unit|positive"):
        memory.parse_size(text)


def _size_refusal(text: str) -> str:
    """What parse_size says of ``text``: its ValueError's message, ``accepted``, or
    ``crashed: ...`` (another exception: an argparse type must raise ValueError)."""
    try:
        memory.parse_size(text)
    except ValueError as exc:
        return str(exc)
    except Exception as exc:
        return f"crashed: {type(exc).__name__}: {exc}"
    return "accepted"


@pytest.mark.parametrize("text", ["1e309GiB", "inf", "nan", "-inf", "InfinityGiB"])
def test_a_size_that_is_no_finite_number_is_refused(text):
    """Issue 31: float('1e309') is inf, and int(inf) was an OverflowError traceback."""
    said = _size_refusal(text)
    assert said == f"{text!r} is not a finite size", said


@pytest.mark.parametrize("text", ["1025TiB", "1e30TiB", "1e300", str(memory.MAX_SIZE + 1)])
def test_a_size_past_any_device_is_refused_and_the_largest_is_not(text):
    said = _size_refusal(text)
    assert said.startswith(f"{text!r} is more than 1 PiB"), said
    assert memory.parse_size("1024TiB") == memory.MAX_SIZE  # two-sided: the bound itself


def test_device_memory_prefers_the_override_then_cuda_then_host_ram(tmp_path):
    assert memory.device_memory("cpu", 123).bytes == 123
    cuda = memory.device_memory("cuda", None, lambda: (80 << 30, "H100"))
    assert (cuda.bytes, "H100" in cuda.source) == (80 << 30, True)
    with pytest.raises(ValueError, match="--device-memory"):
        memory.device_memory("cuda", None, None)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  100 kB\nMemAvailable:    2048 kB\n")
    host = memory.host_available_memory(meminfo)
    assert (host.bytes, "MemAvailable" in host.source) == (2048 * 1024, True)
    fallback = memory.host_available_memory(tmp_path / "missing")
    assert fallback.bytes > 0 and "sysconf" in fallback.source
