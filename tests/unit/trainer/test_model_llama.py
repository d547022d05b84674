"""The Llama module (issue #5): shapes and dtypes, causality, the documented
initialization, seeds, the meta device, autocast, and clear errors for bad input."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from trainer.model import preset
from trainer.model.llama import INIT_STD, Llama, RMSNorm, build_model

TINY = preset("tiny")


def ids(batch: int, seq: int, vocab: int = TINY.vocab_size, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def tiny() -> Llama:
    return build_model(TINY, seed=0)


def test_logits_are_float32_batch_by_seq_by_vocab(tiny):
    logits = tiny(ids(3, 17))
    assert logits.shape == (3, 17, TINY.vocab_size) and logits.dtype == torch.float32
    assert torch.isfinite(logits).all()


def test_a_token_never_sees_the_future(tiny):
    a, b = ids(1, 20, seed=1), ids(1, 20, seed=2)
    b[:, :12] = a[:, :12]
    with torch.no_grad():
        la, lb = tiny(a), tiny(b)
    assert torch.allclose(la[:, :12], lb[:, :12], atol=1e-6, rtol=0)
    assert not torch.allclose(la[:, 12:], lb[:, 12:])


def test_position_matters_through_rope(tiny):
    # Same tokens, swapped order: a bag-of-words model would give the same last logits.
    x = ids(1, 8)
    with torch.no_grad():
        forward, backward = tiny(x)[0, -1], tiny(x.flip(1))[0, -1]
    assert not torch.allclose(forward, backward)


def test_the_state_dict_holds_parameters_only_with_hf_names(tiny):
    names = list(tiny.state_dict())
    assert names[0] == "model.embed_tokens.weight" and names[-1] == "lm_head.weight"
    assert all(n.endswith(".weight") for n in names)
    assert not list(tiny.buffers()), "rotary tables are computed, not stored"


def test_initialization_is_the_documented_one():
    cfg = dataclasses.replace(
        TINY, hidden_size=256, num_attention_heads=8, num_key_value_heads=4, num_hidden_layers=4
    )
    model = build_model(cfg, seed=1)
    residual_std = INIT_STD / math.sqrt(2 * cfg.num_hidden_layers)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            assert torch.equal(p, torch.ones_like(p)), name
            continue
        want = residual_std if name.endswith(("o_proj.weight", "down_proj.weight")) else INIT_STD
        assert abs(p.mean().item()) < 4 * want / math.sqrt(p.numel()), name
        assert abs(p.std().item() / want - 1) < 0.05, f"{name}: std {p.std().item():.5f}"


def test_a_seed_reproduces_the_weights_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a, b, c = build_model(TINY, seed=7), build_model(TINY, seed=7), build_model(TINY, seed=8)
    assert torch.equal(torch.rand(1), expected_next)
    for (name, pa), pb, pc in zip(
        a.state_dict().items(), b.state_dict().values(), c.state_dict().values(), strict=True
    ):
        assert torch.equal(pa, pb), name
        if not name.endswith("norm.weight"):
            assert not torch.equal(pa, pc), name


def test_meta_builds_take_no_memory_and_know_their_shapes():
    model = build_model(preset("370m"), device="meta")
    assert all(p.is_meta for p in model.parameters())
    assert model.lm_head.weight.shape == (50257, 1024)


def test_tied_models_use_the_embedding_as_output_layer():
    cfg = dataclasses.replace(TINY, tie_word_embeddings=True)
    model = build_model(cfg, seed=0)
    assert model.lm_head is None and "lm_head.weight" not in model.state_dict()
    x = ids(2, 9)
    with torch.no_grad():
        hidden = model.model(x)
        assert torch.equal(model(x), hidden @ model.model.embed_tokens.weight.T)


def test_backward_reaches_every_parameter_with_finite_gradients(tiny):
    # Speed is measured by `trainer plan`'s time estimate, not asserted here (noisy machines).
    x = ids(4, 64)
    tiny.zero_grad()
    F.cross_entropy(tiny(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in tiny.parameters())
    assert all(p.grad.abs().sum() > 0 for p in tiny.parameters())


def test_bf16_autocast_runs_and_rmsnorm_computes_in_float32(tiny):
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        logits = tiny(ids(2, 10))
    assert logits.dtype == torch.bfloat16 and torch.isfinite(logits.float()).all()
    norm = RMSNorm(4, eps=1e-5)
    x = torch.tensor([[1e-3, 2e-3, 3e-3, 4e-3]], dtype=torch.bfloat16)
    expected = x.float() / torch.sqrt(x.float().pow(2).mean() + 1e-5)
    assert norm(x).dtype == torch.float32  # weight (float32) * bf16 result, as in HF
    assert torch.allclose(norm(x), expected.to(torch.bfloat16).float())


def test_a_float64_model_never_rounds_to_float32_in_rmsnorm_or_rope():
    """ "In float32" means "at least float32": the golden traces train a float64 model and
    rely on no step of it rounding to float32 (a float32 step is an error near 1e-7)."""
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    norm = RMSNorm(64, eps=1e-5).double()
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
    assert norm(x).dtype == torch.float64
    assert (norm(x) - expected).abs().max() < 1e-14
    rotary = build_model(TINY, device="meta").model.rotary_emb
    head_dim, positions = rotary.head_dim, 1000
    cos, sin = rotary(positions, dtype=torch.float64)
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] / rotary.theta ** (
        2 * i / head_dim
    )
    assert cos.dtype == sin.dtype == torch.float64
    assert (cos[:, : head_dim // 2] - angles.cos()).abs().max() < 1e-12
    assert (sin[:, head_dim // 2 :] - angles.sin()).abs().max() < 1e-12
    # float32 stays float32 (HF's numerics): the float64 tables are not what it computes.
    cos32, _ = rotary(positions)
    assert cos32.dtype == torch.float32 and (cos32.double() - cos).abs().max() > 1e-9


def test_a_sequence_longer_than_max_positions_is_refused(tiny):
    with pytest.raises(ValueError, match="257 tokens exceeds max_position_embeddings 256"):
        tiny(ids(1, 257))


def test_float_or_1d_input_is_refused_with_its_shape(tiny):
    with pytest.raises(ValueError, match=r"integer tensor \[batch, seq\].*float32"):
        tiny(torch.zeros(1, 4))
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        tiny(torch.zeros(4, dtype=torch.long))
