"""Weights files (issue #5): save/load round-trips bitwise; the writer refuses, writing
nothing, anything that is not the configured model; the loader names every mismatch."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from trainer.model import preset, tensor_count
from trainer.model.hf import WeightsFileError, hf_config_dict, load_weights, save_weights
from trainer.model.llama import build_model

TINY = preset("tiny")


def header_names(path: Path) -> list[str]:
    size = int.from_bytes(path.read_bytes()[:8], "little")
    return [n for n in json.loads(path.read_bytes()[8 : 8 + size]) if n != "__metadata__"]


def assert_nothing_written(directory: Path) -> None:
    assert sorted(p.name for p in directory.iterdir()) == [], "the refused write left files"


@pytest.mark.parametrize("tied", [False, True])
def test_weights_round_trip_bitwise_and_the_size_is_returned(tmp_path, tied):
    cfg = dataclasses.replace(TINY, tie_word_embeddings=tied)
    model = build_model(cfg, seed=0)
    path = tmp_path / "model.safetensors"
    written = save_weights(model, path)
    assert written == path.stat().st_size
    assert len(header_names(path)) == tensor_count(cfg) == (20 if tied else 21)
    assert ("lm_head.weight" in header_names(path)) is not tied
    other = build_model(cfg, seed=1)
    load_weights(other, path)
    for (name, a), b in zip(model.state_dict().items(), other.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"], "temp file left"


def test_loading_into_a_meta_model_materializes_it(tmp_path):
    model = build_model(TINY, seed=0)
    save_weights(model, tmp_path / "w.safetensors")
    empty = build_model(TINY, device="meta")
    load_weights(empty, tmp_path / "w.safetensors")
    x = torch.randint(0, TINY.vocab_size, (1, 8))
    with torch.no_grad():
        assert torch.equal(empty(x), model(x))


def test_an_empty_state_dict_is_refused_and_nothing_is_written(tmp_path):
    class Empty(nn.Module):
        config = TINY

    with pytest.raises(WeightsFileError, match="empty state dict"):
        save_weights(Empty(), tmp_path / "model.safetensors")
    assert_nothing_written(tmp_path)


def test_a_model_that_is_not_its_config_is_refused_by_name(tmp_path):
    model = build_model(TINY, seed=0)
    model.model.extra = nn.Linear(2, 2, bias=False)  # an unexpected tensor
    model.config = dataclasses.replace(TINY, intermediate_size=100)  # 6 wrong shapes
    with pytest.raises(WeightsFileError) as refused:
        save_weights(model, tmp_path / "model.safetensors")
    message = str(refused.value)
    assert "22 tensors, expected 21" in message
    assert "unexpected model.extra.weight" in message
    assert (
        "wrong shape model.layers.0.mlp.gate_proj.weight [176, 64] (expected [100, 64])" in message
    )
    assert "and 1 more" in message  # 6 wrong shapes, 5 listed
    assert_nothing_written(tmp_path)


def test_an_untied_model_whose_lm_head_aliases_the_embedding_is_refused(tmp_path):
    model = build_model(TINY, seed=0)
    model.lm_head.weight = model.model.embed_tokens.weight
    with pytest.raises(WeightsFileError, match=r"lm_head\.weight shares storage with model\.embed"):
        save_weights(model, tmp_path / "model.safetensors")
    assert_nothing_written(tmp_path)


def test_a_meta_model_has_nothing_to_save(tmp_path):
    with pytest.raises(WeightsFileError, match="meta device"):
        save_weights(build_model(TINY, device="meta"), tmp_path / "model.safetensors")
    assert_nothing_written(tmp_path)


def test_a_refused_write_leaves_the_previous_file_untouched(tmp_path):
    path = tmp_path / "model.safetensors"
    save_weights(build_model(TINY, seed=0), path)
    before = path.read_bytes()
    model = build_model(TINY, seed=1)
    model.config = dataclasses.replace(TINY, vocab_size=513)
    with pytest.raises(WeightsFileError):
        save_weights(model, path)
    assert path.read_bytes() == before


def test_the_loader_names_missing_unexpected_reshaped_and_retyped_tensors(tmp_path):
    model = build_model(TINY, seed=0)
    tensors = {n: t.clone() for n, t in model.state_dict().items()}
    del tensors["model.norm.weight"]
    tensors["model.norm.bias"] = torch.zeros(64)
    tensors["lm_head.weight"] = torch.zeros(500, 64)
    tensors["model.layers.1.mlp.up_proj.weight"] = tensors["model.layers.1.mlp.up_proj.weight"].to(
        torch.bfloat16
    )
    path = tmp_path / "bad.safetensors"
    save_file(tensors, str(path))
    before = model.model.norm.weight.detach().clone()
    with pytest.raises(WeightsFileError) as refused:
        load_weights(model, path)
    message = str(refused.value)
    assert str(path) in message
    assert "missing model.norm.weight" in message
    assert "unexpected model.norm.bias" in message
    assert "wrong shape lm_head.weight [500, 64] (expected [512, 64])" in message
    assert "model.layers.1.mlp.up_proj.weight torch.bfloat16 (model torch.float32)" in message
    assert torch.equal(model.model.norm.weight, before), "a refused load changed the model"


@pytest.mark.parametrize(("content", "expected"), [(None, "no such file"), (b"junk", "not a")])
def test_a_missing_or_corrupt_file_is_named(tmp_path, content, expected):
    path = tmp_path / "model.safetensors"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(WeightsFileError, match=expected) as refused:
        load_weights(build_model(TINY, device="meta"), path)
    assert str(path) in str(refused.value)


def test_the_config_json_describes_the_architecture_for_transformers():
    cfg = preset("370m")
    written = hf_config_dict(cfg)
    assert written["architectures"] == ["LlamaForCausalLM"] and written["model_type"] == "llama"
    assert written["tie_word_embeddings"] is False and written["dtype"] == "float32"
    assert written["head_dim"] == 64 and written["num_key_value_heads"] == 4
    assert written["rope_parameters"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert json.loads(json.dumps(written)) == written  # plain JSON
    tied = hf_config_dict(dataclasses.replace(TINY, tie_word_embeddings=True, head_dim=None))
    assert tied["tie_word_embeddings"] is True and tied["head_dim"] == 16
