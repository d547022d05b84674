"""The 370M model through a checkpoint and an export (FALSIFY-ARCH-370M-010 and -013).

Slow (a 4.5 GB checkpoint and a 1.5 GB export on CPU), so marked ``slow``.
"""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors import safe_open

from tests.unit.trainer.loop_support import TensorSequences, loop_config, random_rows
from trainer.checkpoint.export import ExportError, export_model, tensor_sha256
from trainer.cli import main
from trainer.model import llama
from trainer.model.config import preset
from trainer.train import loop
from trainer.train.options import RunOptions

TENSORS = 219
PARAMETERS = 373_509_120
TENSOR_BYTES = 1_494_036_480  # PARAMETERS * 4 (float32)


def _header(path):
    """The safetensors JSON header, read from the bytes (not through the library)."""
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(length))


@pytest.mark.slow
def test_arch_370m_010_a_loop_checkpoint_after_two_steps_passes_every_check(tmp_path, capsys):
    cfg = preset("370m")
    run = loop_config(
        {
            "model": cfg,
            "training.seed": 0,
            "data.micro_batch": 1,
            "training.gradient_accumulation": 1,
            "data.seq_len": 128,
            "training.epochs": 1,
            "training.max_steps": 2,
            "training.warmup_steps": 0,
            "optimizer.lr": 3e-4,
            "optimizer.min_lr": 3e-5,
        }
    )
    data = TensorSequences(random_rows(2, 128, seed=0, vocab_size=cfg.vocab_size))
    options = RunOptions(out_dir=tmp_path, checkpoint=True)
    result = loop.train(run, data, None, options=options)  # the loop saves its last step
    assert result.checkpoints == [2]
    model = result.model
    ckpt = tmp_path / "checkpoints" / "step-00000002"
    # The bytes first (a checkpoint of other weights fails here, before the checker's read of
    # 4.5 GB), then the checker over every file.
    header = {k: v for k, v in _header(ckpt / "model.safetensors").items() if k != "__metadata__"}
    assert len(header) == TENSORS
    assert {v["dtype"] for v in header.values()} == {"F32"}
    assert not any(name.endswith(".bias") for name in header)
    live = model.state_dict()
    with safe_open(str(ckpt / "model.safetensors"), framework="pt") as fh:
        for name in header:
            saved = fh.get_tensor(name)
            assert torch.isfinite(saved).all(), name
            assert torch.equal(saved, live[name]), f"{name} is not the weight after step 2"
        assert not torch.equal(
            fh.get_tensor("lm_head.weight"), fh.get_tensor("model.embed_tokens.weight")
        )
    assert main(["inspect", str(ckpt), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and report["problems"] == []
    assert (report["tensor_count"], report["parameter_count"]) == (TENSORS, PARAMETERS)
    assert all(f["ok"] for f in report["files"]) and len(report["files"]) == 5


@pytest.mark.ship_blocking
@pytest.mark.slow
def test_arch_370m_013_the_export_holds_219_tensors_and_every_byte_of_the_model(tmp_path):
    model = llama.build_model(preset("370m"), seed=0)
    try:
        report = export_model(model, tmp_path / "out")
    except ExportError as exc:  # the claim fails: no export of the model's 219 tensors
        pytest.fail(f"the export of a whole 370M model was refused: {exc}")
    header = {
        k: v
        for k, v in _header(tmp_path / "out" / "model.safetensors").items()
        if k != "__metadata__"
    }
    state = model.state_dict()
    assert len(header) == report.tensor_count == TENSORS
    header_bytes = sum(v["data_offsets"][1] - v["data_offsets"][0] for v in header.values())
    assert header_bytes == report.tensor_bytes == TENSOR_BYTES
    assert sum(t.numel() * 4 for t in state.values()) == TENSOR_BYTES
    with safe_open(str(tmp_path / "out" / "model.safetensors"), framework="pt") as fh:
        for name, t in state.items():
            assert tensor_sha256(fh.get_tensor(name)) == tensor_sha256(t), name
