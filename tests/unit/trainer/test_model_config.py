"""The model config (issue #5): every broken rule is reported at once with field and hint;
presets are valid; the analytic counts equal the built module's for any valid config;
`import trainer.model` stays torch-free."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.model import (
    PRESETS,
    ArchProblem,
    LlamaConfig,
    ModelConfigError,
    param_count,
    parameter_shapes,
    preset,
    tensor_count,
)
from trainer.model import llama as llama_module
from trainer.model.sovereign import deviations

TINY = preset("tiny")


@st.composite
def llama_configs(draw, max_layers: int = 3) -> LlamaConfig:
    """Valid small configs: GQA ratios 1..4, even head_dim, explicit or derived head_dim."""
    kv_heads = draw(st.integers(1, 4))
    heads = kv_heads * draw(st.integers(1, 4))
    head_dim = draw(st.sampled_from([2, 4, 6, 8, 16]))
    return LlamaConfig(
        vocab_size=draw(st.integers(2, 300)),
        hidden_size=heads * head_dim,
        intermediate_size=draw(st.integers(1, 96)),
        num_hidden_layers=draw(st.integers(1, max_layers)),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim if draw(st.booleans()) else None,
        max_position_embeddings=draw(st.integers(16, 64)),
        rope_theta=draw(st.sampled_from([100.0, 10000.0, 500000.0])),
        rms_norm_eps=draw(st.sampled_from([1e-6, 1e-5, 1e-3])),
        tie_word_embeddings=draw(st.booleans()),
    )


def fields_of(cfg: LlamaConfig) -> list[str]:
    return [p.field for p in cfg.problems()]


# ---------------------------------------------------------------- presets
def test_every_preset_is_valid_and_the_contracted_one_is_370m():
    assert set(PRESETS) == {"tiny", "50m", "370m"}
    for name, cfg in PRESETS.items():
        assert cfg.problems() == [], name
    assert deviations(preset("370m")) == []
    assert preset("370m").max_position_embeddings == 1024


def test_preset_counts_are_written_down_and_match_the_built_module():
    expected = {"tiny": (158_016, 21), "50m": (50_990_208, 75), "370m": (373_509_120, 219)}
    for name, (params, tensors) in expected.items():
        cfg = preset(name)
        assert (param_count(cfg), tensor_count(cfg)) == (params, tensors), name
        model = llama_module.build_model(cfg, device="meta")
        assert sum(p.numel() for p in model.parameters()) == params, name
        assert len(model.state_dict()) == tensors, name


def test_an_unknown_preset_names_the_known_ones():
    with pytest.raises(ModelConfigError) as refused:
        preset("7b")
    assert "'7b'" in str(refused.value)
    for name in PRESETS:
        assert name in str(refused.value)


def test_a_preset_is_a_starting_point_for_another_vocab():
    cfg = dataclasses.replace(preset("tiny"), vocab_size=8192)
    assert cfg.problems() == []
    assert parameter_shapes(cfg)["model.embed_tokens.weight"] == (8192, 64)


# ---------------------------------------------------------------- rules
def test_a_valid_config_has_no_problems_and_validates():
    TINY.validate()
    assert TINY.resolved_head_dim == 16 and TINY.kv_group_size == 2


def test_heads_must_divide_hidden_when_head_dim_is_derived():
    cfg = dataclasses.replace(TINY, hidden_size=66)
    [problem] = cfg.problems()
    assert problem.field == "num_attention_heads"
    assert "66" in problem.message and "4" in problem.message and "dropped" in problem.message


def test_heads_times_explicit_head_dim_must_equal_hidden():
    cfg = dataclasses.replace(TINY, head_dim=8)
    [problem] = cfg.problems()
    assert problem.field == "head_dim"
    assert "4 * head_dim 8 = 32" in problem.message and "64" in problem.message
    assert "set head_dim to 16" in problem.hint


def test_kv_heads_must_divide_heads_and_the_hint_lists_divisors():
    cfg = dataclasses.replace(TINY, num_key_value_heads=3)
    [problem] = cfg.problems()
    assert problem.field == "num_key_value_heads"
    assert "[1, 2, 4]" in problem.hint


def test_head_dim_must_be_even_for_rope():
    cfg = dataclasses.replace(TINY, hidden_size=60, num_attention_heads=4, num_key_value_heads=1)
    assert fields_of(cfg) == ["head_dim"]
    assert "odd" in cfg.problems()[0].message


def test_every_problem_is_reported_not_only_the_first():
    cfg = dataclasses.replace(
        TINY, vocab_size=0, intermediate_size=-1, rms_norm_eps=0.0, rope_theta=-1.0
    )
    assert fields_of(cfg) == ["vocab_size", "intermediate_size", "rms_norm_eps", "rope_theta"]
    with pytest.raises(ModelConfigError) as refused:
        cfg.validate()
    assert len(refused.value.problems) == 4
    assert all(isinstance(p, ArchProblem) and p.hint for p in refused.value.problems)
    message = str(refused.value)
    for field in ("vocab_size", "intermediate_size", "rms_norm_eps", "rope_theta"):
        assert field in message


def test_zero_heads_stops_before_dividing_by_them():
    cfg = dataclasses.replace(TINY, num_attention_heads=0, num_key_value_heads=0)
    assert fields_of(cfg) == ["num_attention_heads", "num_key_value_heads"]


def test_wrong_types_are_named_not_crashed_on():
    cfg = dataclasses.replace(TINY, hidden_size="64", num_hidden_layers=True, rope_theta="1e4")
    assert fields_of(cfg) == ["hidden_size", "num_hidden_layers", "rope_theta"]
    cfg = dataclasses.replace(TINY, tie_word_embeddings="no", head_dim=16.0)
    assert fields_of(cfg) == ["head_dim", "tie_word_embeddings"]


def test_build_model_validates_first():
    with pytest.raises(ModelConfigError, match="num_key_value_heads"):
        llama_module.build_model(dataclasses.replace(TINY, num_key_value_heads=3), device="meta")


# ---------------------------------------------------------------- analytic counts
@settings(max_examples=40, deadline=None)
@given(cfg=llama_configs())
def test_analytic_shapes_and_counts_equal_the_built_module(cfg):
    model = llama_module.build_model(cfg, device="meta")
    state = model.state_dict()
    assert [(n, tuple(t.shape)) for n, t in state.items()] == list(parameter_shapes(cfg).items())
    assert param_count(cfg) == sum(p.numel() for p in model.parameters())
    assert tensor_count(cfg) == len(state)


def test_tied_models_count_the_table_once_and_store_no_lm_head():
    tied = dataclasses.replace(preset("370m"), tie_word_embeddings=True)
    assert (param_count(tied), tensor_count(tied)) == (322_045_952, 218)
    assert "lm_head.weight" not in parameter_shapes(tied)
    assert {p.field for p in deviations(tied)} == {"tie_word_embeddings", "parameters", "tensors"}


def test_importing_trainer_model_does_not_import_torch():
    code = (
        "import sys, trainer.model as m; m.param_count(m.preset('370m')); "
        "import trainer.model.sovereign; "
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr or "torch was imported"
