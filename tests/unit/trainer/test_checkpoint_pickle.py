"""FALSIFY-TRAIN-LOOP-016: pickle never touches state.

Save, resume and export a tiny run with pickle.dump/dumps/load/loads/Unpickler and
torch.save/torch.load patched to fail; then every file in the checkpoint and export
directories is .safetensors or .json, parses, and starts with neither the pickle opcode
0x80 nor torch.save's zip magic. A static scan keeps the calls out of trainer/.
"""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tests.unit.trainer.checkpoint_support import fresh, save, trained
from trainer.checkpoint.export import export_checkpoint
from trainer.checkpoint.load import load_checkpoint

ROOT = Path(__file__).resolve().parents[3]


class PickleCalledError(AssertionError):
    """A pickle entry point was called while saving, resuming or exporting."""


def _forbid(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name):
        def called(*args, **kwargs):
            raise PickleCalledError(f"{name} was called")

        return called

    for name in ("dump", "dumps", "load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse(f"pickle.{name}"))
    monkeypatch.setattr(torch, "save", refuse("torch.save"))
    monkeypatch.setattr(torch, "load", refuse("torch.load"))


@pytest.mark.ship_blocking
def test_save_resume_and_export_run_without_pickle_and_write_only_safetensors_and_json(
    tmp_path, monkeypatch
):
    model, optimizer = trained(steps=2)
    _forbid(monkeypatch)
    path = save(tmp_path / "run", 2, model, optimizer)
    model2, optimizer2 = fresh(seed=3)
    load_checkpoint(path, model2, optimizer2)
    export_checkpoint(path, tmp_path / "export")
    monkeypatch.undo()

    files = sorted(path.iterdir()) + sorted((tmp_path / "export").iterdir())
    assert len(files) == 8
    for file in files:
        head = file.read_bytes()[:4]
        assert head[:1] != b"\x80", f"{file} starts with the pickle opcode"
        assert head != b"PK\x03\x04", f"{file} is a torch.save zip"
        assert file.suffix in (".safetensors", ".json"), f"{file}: not safetensors or JSON"
        if file.suffix == ".json":
            json.loads(file.read_text(encoding="utf-8"))
        else:
            with safe_open(str(file), framework="pt") as fh:
                list(fh.keys())


_PICKLING_MODULES = {"pickle", "_pickle", "cPickle", "dill", "cloudpickle", "joblib", "shelve"}


def _pickle_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """Imports of pickling modules and any torch.save / torch.load reference (code, not prose)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {a.name}")
                for a in node.names
                if a.name.split(".")[0] in _PICKLING_MODULES
            ]
        elif (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").split(".")[0] in _PICKLING_MODULES
        ):
            found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.ImportFrom) and node.module == "torch":
            found += [
                (node.lineno, f"from torch import {a.name}")
                for a in node.names
                if a.name in ("save", "load")
            ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in ("save", "load")
            and isinstance(node.value, ast.Name)
            and node.value.id == "torch"
        ):
            found.append((node.lineno, f"torch.{node.attr}"))
    return found


def test_no_trainer_module_uses_pickle_torch_save_or_torch_load():
    offenders = []
    for file in sorted((ROOT / "trainer").rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
        offenders += [f"{file.relative_to(ROOT)}:{n}: {what}" for n, what in _pickle_uses(tree)]
    assert not offenders, "pickle-based state I/O in trainer/:\n" + "\n".join(offenders)


def test_the_scan_sees_each_form_of_pickling():
    code = "import pickle\nfrom dill import dumps\nfrom torch import load\ntorch.save(x, p)\n"
    assert [n for n, _ in _pickle_uses(ast.parse(code))] == [1, 2, 3, 4]
