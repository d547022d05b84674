"""HF parity oracle (issue #5): for random small configs our logits equal
transformers.LlamaForCausalLM's (eager attention, float32) with the same weights, and
weights load both ways through files: ours -> HF (save_weights + hf_config_dict,
from_pretrained) and HF -> ours (save_pretrained, load_weights).

transformers is in the dev extra and imported lazily here, never by the trainer; this
test must run in CI, so it is not skipped when transformers is missing.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.trainer.test_model_config import llama_configs
from trainer.model import LlamaConfig, parameter_shapes
from trainer.model.hf import hf_config_dict, load_weights, save_weights
from trainer.model.llama import build_model

TOLERANCE = 1e-5  # float32 logits, as GATE-ARCH-370M-004 states


@pytest.fixture(scope="module")
def hf():
    import transformers  # noqa: PLC0415 - test-only dependency, imported when needed

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@settings(max_examples=25, deadline=None)
@given(cfg=llama_configs(), seq=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_logits_equal_hf_llama_and_weights_load_both_ways(hf, cfg, seq, seed):
    torch.manual_seed(seed)  # HF's own initialization for the HF -> ours direction
    input_ids = torch.randint(0, cfg.vocab_size, (2, seq))
    with tempfile.TemporaryDirectory() as tmp:
        ours_dir, hf_dir = Path(tmp, "ours"), Path(tmp, "hf")
        # ours -> HF
        ours = build_model(cfg, seed=seed)
        save_weights(ours, ours_dir / "model.safetensors")
        (ours_dir / "config.json").write_text(json.dumps(hf_config_dict(cfg)))
        theirs = hf.LlamaForCausalLM.from_pretrained(
            ours_dir, attn_implementation="eager", dtype=torch.float32
        ).eval()
        assert theirs.config.tie_word_embeddings == cfg.tie_word_embeddings
        with torch.no_grad():
            diff = max_diff(ours(input_ids), theirs(input_ids).logits)
        assert diff <= TOLERANCE, f"ours vs HF loaded from our files: {diff:.3g} ({cfg})"

        # HF -> ours: a fresh HF model with HF's initialization, saved by HF.
        fresh = hf.LlamaForCausalLM(theirs.config).eval()
        fresh.save_pretrained(hf_dir)
        names = [
            n for n in fresh.state_dict() if not (cfg.tie_word_embeddings and n == "lm_head.weight")
        ]
        assert names == list(parameter_shapes(cfg))
        loaded = build_model(cfg, device="meta")
        load_weights(loaded, hf_dir / "model.safetensors")
        with torch.no_grad():
            diff = max_diff(loaded(input_ids), fresh(input_ids).logits)
        assert diff <= TOLERANCE, f"HF vs ours loaded from HF's files: {diff:.3g} ({cfg})"


def test_the_exported_config_is_read_by_transformers_as_our_architecture(hf):
    cfg = LlamaConfig(
        vocab_size=300,
        hidden_size=96,
        intermediate_size=200,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=128,
        rope_theta=500000.0,
        rms_norm_eps=1e-6,
    )
    read = hf.LlamaConfig.from_dict(hf_config_dict(cfg))
    assert (read.vocab_size, read.hidden_size, read.intermediate_size) == (300, 96, 200)
    assert (read.num_attention_heads, read.num_key_value_heads, read.head_dim) == (6, 2, 16)
    assert read.rope_parameters["rope_theta"] == 500000.0 and read.rms_norm_eps == 1e-6
    assert read.tie_word_embeddings is False and read.hidden_act == "silu"
    assert read.attention_bias is False and read.mlp_bias is False
    assert read.max_position_embeddings == 128
