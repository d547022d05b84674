"""tools/cuda_smoke.py's own parts, on a CPU: the checkpoint comparison counts exactly the
values that differ, evidence text carries no absolute path, and without CUDA it refuses."""

from __future__ import annotations

import pytest
import torch

from tests.unit.trainer.checkpoint_support import save, trained
from tools import cuda_smoke


def test_equal_checkpoints_compare_equal_and_one_changed_weight_is_counted(tmp_path):
    model, optimizer = trained(steps=2)
    first = save(tmp_path / "a", 4, model, optimizer)
    twin = save(tmp_path / "b", 4, model, optimizer)
    same = cuda_smoke.compare_checkpoints(first, twin)
    assert set(same) == set(cuda_smoke.TENSOR_FILES)
    assert all(f["bytes_equal"] and f["differing_values"] == 0 for f in same.values()), same
    assert same["model.safetensors"]["values"] == sum(p.numel() for p in model.parameters())

    with torch.no_grad():
        first_weight = next(model.parameters()).view(-1)
        first_weight[3] += 0.25
        first_weight[5] += 0.5
    changed = cuda_smoke.compare_checkpoints(first, save(tmp_path / "c", 4, model, optimizer))
    weights = changed["model.safetensors"]
    assert not weights["bytes_equal"]
    assert weights["differing_values"] == 2, "two values of one tensor differ"
    assert weights["max_abs_difference"] == pytest.approx(0.5, rel=1e-3)
    assert changed["optimizer.safetensors"]["differing_values"] == 0


def test_evidence_text_names_no_absolute_path():
    text = (
        "/opt/venv/lib/python3.12/site-packages/torch/x.py:322: UserWarning: TF32\n"
        "runs/cuda-smoke/demo/run.yaml:54:3: warning (see /tmp/cuda/log.txt)"
    )
    out = cuda_smoke.portable_text(text)
    assert "runs/cuda-smoke/demo/run.yaml:54:3" in out, "a relative path must stay as it is"
    assert "/opt/venv" not in out and "/tmp/cuda" not in out, out
    assert "x.py" in out and "log.txt" in out, "the file's name stays readable"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_without_cuda_it_refuses_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "smoke.json"
    assert cuda_smoke.main(["--out", str(out), "--work", "runs/never"]) == 2
    assert not out.exists()
    assert "CUDA is not available" in capsys.readouterr().err
