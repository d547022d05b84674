"""`trainer inspect` and `trainer export` from the command line (in-process main())."""

from __future__ import annotations

import json

from tests.unit.trainer.checkpoint_support import save, trained
from trainer.cli import main


def test_inspect_reports_a_valid_checkpoint_and_exits_1_on_a_flipped_byte(tmp_path, capsys):
    model, optimizer = trained(steps=1)
    ckpt = save(tmp_path, 7, model, optimizer)
    assert main(["inspect", str(ckpt), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True
    assert (report["format"], report["format_version"], report["step"]) == (
        "shipgate-checkpoint",
        1,
        7,
    )
    assert (report["tensor_count"], report["parameter_count"]) == (21, 158_016)
    assert report["architecture"]["hidden_size"] == 64
    assert [(f["name"], f["ok"]) for f in report["files"]] == [
        ("model.safetensors", True),
        ("optimizer.safetensors", True),
        ("rng.json", True),
        ("rng.safetensors", True),
        ("state.json", True),
    ]
    data = bytearray((ckpt / "optimizer.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (ckpt / "optimizer.safetensors").write_bytes(bytes(data))
    assert main(["inspect", str(ckpt)]) == 1
    captured = capsys.readouterr()
    assert "BAD optimizer.safetensors: sha256 differs from the manifest" in captured.out
    assert "INVALID" in captured.out and "optimizer.safetensors" in captured.err
    assert main(["inspect", str(tmp_path / "nothing")]) == 1


def test_export_writes_a_loadable_directory_and_refuses_an_invalid_checkpoint(tmp_path, capsys):
    model, optimizer = trained(steps=1)
    ckpt = save(tmp_path / "run", 3, model, optimizer)
    assert main(["export", str(ckpt), "--out", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    assert "21 tensors" in capsys.readouterr().out
    (ckpt / "stray.pt").write_bytes(b"\x80\x04")
    assert main(["export", str(ckpt), "--out", str(tmp_path / "out2")]) == 1
    assert "stray.pt: unexpected file" in capsys.readouterr().err
    assert not (tmp_path / "out2").exists()
