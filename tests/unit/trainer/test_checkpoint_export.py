"""FALSIFY-TRAIN-LOOP-015 (tiny model): the export holds every tensor with the trained
values, loads in transformers with the same logits, carries the tokenizer, and the
exporter refuses - creating nothing - when the tensors are not the model's.
"""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from tests.unit.trainer.checkpoint_support import TINY, save, trained
from trainer.checkpoint import export
from trainer.checkpoint.export import ExportError, export_checkpoint, export_model
from trainer.model import hf, llama
from trainer.model.params import parameter_shapes
from trainer.model.vocab import VocabMismatchError


def _tokenizer_dir(path, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415

    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))
    return path


def _exported_or_fail(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except (ExportError, hf.WeightsFileError) as exc:
        pytest.fail(f"exporting a correct model was refused: {exc}")


@pytest.mark.ship_blocking
def test_the_export_of_a_trained_model_holds_every_tensor_with_its_trained_value(
    tmp_path, monkeypatch
):
    model, _ = trained(steps=3)
    init = llama.build_model(TINY, seed=0).state_dict()
    report = _exported_or_fail(export_model, model, tmp_path / "out")
    live = model.state_dict()
    expected = parameter_shapes(TINY)
    assert report.tensor_count == len(expected) == 21
    assert report.tensor_bytes == sum(t.numel() * t.element_size() for t in live.values())
    with safe_open(str(tmp_path / "out" / "model.safetensors"), framework="pt") as fh:
        names = set(fh.keys())
        assert names == set(expected), f"missing {sorted(set(expected) - names)}"
        for name in sorted(names):
            t = fh.get_tensor(name)
            assert torch.equal(t, live[name]), f"{name} is not the trained value"
            assert not torch.equal(t, init[name]), f"{name} is the initial value"

    # Handed an empty state dict, the exporter raises and creates nothing.
    monkeypatch.setattr(export, "_weights_to_export", lambda m: {})
    with pytest.raises(ExportError, match="empty"):
        export_model(model, tmp_path / "empty")
    assert not (tmp_path / "empty").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_export_of_a_checkpoint_loads_in_transformers_with_identical_logits(tmp_path):
    import transformers  # noqa: PLC0415 - test-only dependency

    transformers.utils.logging.set_verbosity_error()
    from tokenizers import Tokenizer  # noqa: PLC0415

    model, optimizer = trained(steps=2)
    tokenizer = _tokenizer_dir(tmp_path / "tok", TINY.vocab_size)
    ckpt = save(tmp_path / "run", 2, model, optimizer, tokenizer_dir=str(tokenizer))
    _exported_or_fail(export_checkpoint, ckpt, tmp_path / "out")
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    ]
    assert Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size() == TINY.vocab_size
    theirs = transformers.LlamaForCausalLM.from_pretrained(
        out, attn_implementation="eager", dtype=torch.float32
    ).eval()
    ids = torch.randint(0, TINY.vocab_size, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (model(ids) - theirs(ids).logits).abs().max().item()
    assert diff <= 1e-5, f"max |logits ours - HF| = {diff}"


def test_the_exporter_refuses_an_empty_or_misshapen_state_and_a_wrong_tokenizer_writing_nothing(
    tmp_path, monkeypatch
):
    model, _ = trained(steps=1)
    out = tmp_path / "out"
    monkeypatch.setattr(hf, "_tensors_for_file", lambda m: {})
    with pytest.raises(ExportError, match="empty"):
        export_model(model, out)
    monkeypatch.undo()
    assert not out.exists() and list(tmp_path.iterdir()) == []
    real = hf._tensors_for_file
    monkeypatch.setattr(
        hf, "_tensors_for_file", lambda m: {**real(m), "lm_head.weight": torch.zeros(3, 3)}
    )
    with pytest.raises(ExportError, match=r"wrong shape lm_head\.weight"):
        export_model(model, out)
    monkeypatch.undo()
    with pytest.raises(VocabMismatchError, match="511"):
        export_model(model, out, tokenizer_dir=_tokenizer_dir(tmp_path / "tok", 511))
    assert not out.exists()
    real_export = export._weights_to_export

    def one_value_changed(m):
        tensors = dict(real_export(m))
        tensors["model.norm.weight"] = tensors["model.norm.weight"] + 1.0
        return tensors

    monkeypatch.setattr(export, "_weights_to_export", one_value_changed)
    with pytest.raises(ExportError, match=r"not the live weights: model\.norm\.weight"):
        export_model(model, out)
    monkeypatch.undo()
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not an empty directory"):
        export_model(model, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_bitwise_equal_is_byte_identity_not_float_equality():
    """What the exporter's "the live weights" checks compare: bytes, dtype and shape, so a
    -0.0 for 0.0 or a reshaped tensor is not the weight, and a NaN is itself."""
    x = torch.tensor([0.0, 1.5, float("nan")])
    assert export.bitwise_equal(x, x.clone())
    assert export.bitwise_equal(x[::2], torch.tensor([0.0, float("nan")]))  # strided view
    assert not export.bitwise_equal(x, torch.tensor([-0.0, 1.5, float("nan")]))
    assert not export.bitwise_equal(x, x.to(torch.float64))
    assert not export.bitwise_equal(x[:2], x[:2].reshape(2, 1))
    assert not export.bitwise_equal(x[:2], torch.tensor([0.0, 1.5000001]))
    assert export.tensor_sha256(x[::2]) == export.tensor_sha256(torch.tensor([0.0, float("nan")]))
