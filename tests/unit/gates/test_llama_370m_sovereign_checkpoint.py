"""The checks behind GATE-ARCH-370M-002 and -005
(tests/measurements/llama_370m_sovereign_checkpoint.py) pass on a real loop checkpoint and fail
on each corruption they exist to catch.

A tiny model of the same family stands in for the 370M one (the gate itself runs on the
tools/make_370m_checkpoint.py artifact); the expected table is built from the tiny config.
`trainer inspect` / `trainer export` run in-process here (same trainer.cli.main the
measurement runs as a subprocess) to keep the test fast; one test runs the real subprocess.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from tests.measurements import llama_370m_sovereign_checkpoint as gate
from trainer.cli import main as trainer_main
from trainer.config.in_code import config_from_values
from trainer.model.config import LlamaConfig, preset
from trainer.model.llama import build_model
from trainer.model.params import parameter_shapes
from trainer.train import loss
from trainer.train.loop import train
from trainer.train.options import RunOptions

ROOT = Path(__file__).resolve().parents[3]
SEQ_LEN = 8
REAL_RUN_TRAINER = gate.run_trainer  # kept before the autouse fixture patches it


def _tiny() -> LlamaConfig:
    return dataclasses.replace(
        preset("tiny"),
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=None,
        max_position_embeddings=64,
    )


def _expected(cfg: LlamaConfig) -> gate.Expected:
    arch = dataclasses.asdict(cfg)
    arch["head_dim"] = cfg.resolved_head_dim
    del arch["max_position_embeddings"]  # not part of the contract's table
    return gate.Expected(parameter_shapes(cfg), arch)


class _Rows:
    def __init__(self, n: int, vocab: int) -> None:
        self.rows = torch.randint(
            0, vocab, (n, SEQ_LEN + 1), generator=torch.Generator().manual_seed(0)
        )
        self.num_sequences, self.seq_len = n, SEQ_LEN

    def batch(self, indices):
        return loss.next_token_pairs(self.rows[list(indices)], pad_id=None)


def _in_process(root: Path, *args: str) -> subprocess.CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = trainer_main(list(args))
    return subprocess.CompletedProcess(args, rc, out.getvalue(), err.getvalue())


@pytest.fixture(autouse=True)
def one_thread_in_process_cli(monkeypatch):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(gate, "run_trainer", _in_process)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def loop_checkpoint(tmp_path_factory) -> Path:
    """step-00000002 of a 2-step loop run of the tiny model (micro_batch 1, seed 0)."""
    run_dir = tmp_path_factory.mktemp("run")
    cfg = _tiny()
    config = config_from_values(
        cfg,
        data={"micro_batch": 1, "seq_len": SEQ_LEN},
        optimizer={"lr": 3e-4, "min_lr": 3e-5},
        training={
            "seed": 0,
            "gradient_accumulation": 1,
            "epochs": 1,
            "max_steps": 2,
            "warmup_steps": 0,
        },
    )
    options = RunOptions(out_dir=run_dir, checkpoint=True)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = train(config, _Rows(2, cfg.vocab_size), None, options=options)
        assert result.checkpoints == [2]
    finally:
        torch.set_num_threads(before)
    return run_dir / "checkpoints" / "step-00000002"


@pytest.fixture
def copy(loop_checkpoint, tmp_path) -> Path:
    target = tmp_path / "run" / loop_checkpoint.name
    shutil.copytree(loop_checkpoint, target)
    return target


def _failed(path: Path) -> dict[str, str]:
    checks, _ = gate.checkpoint_checks(ROOT, path, _expected(_tiny()))
    assert [c.name for c in checks] == list(gate.CHECKS)
    return {c.name: c.detail for c in checks if not c.ok}


def _tensors(path: Path) -> dict[str, Tensor]:
    with safe_open(str(path), framework="pt") as fh:
        return {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118


def _rewrite(ckpt: Path, name: str, tensors: dict[str, Tensor]) -> None:
    """Replace a safetensors file and make the manifest agree with the new bytes, so only
    the content checks can notice."""
    save_file(tensors, str(ckpt / name), metadata={"format": "pt"})
    _refresh_manifest(ckpt)


def _refresh_manifest(ckpt: Path) -> None:
    manifest = json.loads((ckpt / "manifest.json").read_text())
    for file in manifest["files"]:
        data = (ckpt / file).read_bytes()
        manifest["files"][file] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (ckpt / "manifest.json").write_text(json.dumps(manifest))


def test_every_check_passes_on_a_loop_checkpoint(loop_checkpoint):
    checks, facts = gate.checkpoint_checks(ROOT, loop_checkpoint, _expected(_tiny()))
    assert {c.name: c.detail for c in checks if not c.ok} == {}
    assert facts["tensors_equal_to_init"] == 0
    assert 0 < facts["max_abs_drift_from_init"] <= gate.MAX_INIT_DRIFT


@pytest.mark.slow  # a fresh interpreter importing torch: ~4 s
def test_the_real_cli_subprocess_reports_the_checkpoint_valid(loop_checkpoint):
    proc = REAL_RUN_TRAINER(ROOT, "inspect", str(loop_checkpoint), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["valid"] is True


def _flip_a_model_byte(ckpt: Path) -> None:
    data = bytearray((ckpt / "model.safetensors").read_bytes())
    data[-5] ^= 0x40
    (ckpt / "model.safetensors").write_bytes(bytes(data))


def _drop_lm_head(ckpt: Path) -> None:
    tensors = _tensors(ckpt / "model.safetensors")
    del tensors["lm_head.weight"]
    _rewrite(ckpt, "model.safetensors", tensors)
    manifest = json.loads((ckpt / "manifest.json").read_text())
    manifest["tensor_count"] -= 1
    manifest["parameter_count"] -= 64 * 16
    (ckpt / "manifest.json").write_text(json.dumps(manifest))


def _init_weights(ckpt: Path) -> None:
    _rewrite(ckpt, "model.safetensors", build_model(_tiny(), seed=0).state_dict())


def _other_seed(ckpt: Path) -> None:
    state = json.loads((ckpt / "state.json").read_text())
    state["seed"] = 1
    (ckpt / "state.json").write_text(json.dumps(state))
    _refresh_manifest(ckpt)


def _nan(ckpt: Path) -> None:
    tensors = _tensors(ckpt / "model.safetensors")
    tensors["model.norm.weight"][3] = float("nan")
    _rewrite(ckpt, "model.safetensors", tensors)


def _lm_head_is_embedding(ckpt: Path) -> None:
    tensors = _tensors(ckpt / "model.safetensors")
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
    _rewrite(ckpt, "model.safetensors", tensors)


def _bf16(ckpt: Path) -> None:
    tensors = _tensors(ckpt / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"].to(torch.bfloat16)
    _rewrite(ckpt, "model.safetensors", tensors)


def _moments_missing(ckpt: Path) -> None:
    tensors = _tensors(ckpt / "optimizer.safetensors")
    del tensors["lm_head.weight.exp_avg"]
    _rewrite(ckpt, "optimizer.safetensors", tensors)


def _optimizer_step_1(ckpt: Path) -> None:
    tensors = _tensors(ckpt / "optimizer.safetensors")
    tensors["model.norm.weight.step"] = torch.tensor(1.0)
    _rewrite(ckpt, "optimizer.safetensors", tensors)


def _planted_file(ckpt: Path) -> None:
    (ckpt / "extra.pt").write_bytes(b"not listed")


def _truncated_header(ckpt: Path) -> None:
    (ckpt / "rng.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    _refresh_manifest(ckpt)


CORRUPTIONS: list[tuple[Callable[[Path], None], set[str]]] = [
    (_flip_a_model_byte, {"manifest_sha256_match", "inspect_cli_valid", "inspect_cli_checksums"}),
    (_drop_lm_head, {"model_tensor_count", "model_names_and_shapes", "model_parameter_count"}),
    (_init_weights, {"not_init_weights"}),
    (_other_seed, {"init_rebuild_is_the_runs"}),
    (_nan, {"model_values_finite"}),
    (_lm_head_is_embedding, {"lm_head_differs_from_embedding"}),
    (_bf16, {"model_dtype_float32"}),
    (_moments_missing, {"optimizer_state_complete"}),
    (_optimizer_step_1, {"optimizer_state_complete"}),
    (_planted_file, {"manifest_lists_every_file", "inspect_cli_valid"}),
    (_truncated_header, {"safetensors_headers_parse"}),
]


@pytest.mark.parametrize(
    ("corrupt", "caught_by"), CORRUPTIONS, ids=[f.__name__.strip("_") for f, _ in CORRUPTIONS]
)
def test_each_corruption_fails_the_checks_that_exist_for_it(copy, corrupt, caught_by):
    corrupt(copy)
    failed = _failed(copy)
    assert caught_by <= set(failed), failed


def test_the_export_of_a_loop_checkpoint_holds_every_byte(loop_checkpoint):
    expected = _expected(_tiny())
    r = gate.export_mismatch(ROOT, loop_checkpoint, expected)
    assert r["tensor_bytes_mismatch"] == 0, r
    assert r["export_tensor_bytes"] == r["checkpoint_tensor_bytes"] == expected.tensor_bytes
    assert (r["export_tensors"], r["config_json_present"]) == (len(expected.shapes), 1)


def _export_then(edit: Callable[[Path], None]):
    def run(root: Path, *args: str) -> subprocess.CompletedProcess:
        done = _in_process(root, *args)
        edit(Path(args[args.index("--out") + 1]) / "model.safetensors")
        return done

    return run


def _empty(path: Path) -> None:
    save_file({}, str(path))


def _without_lm_head(path: Path) -> None:
    save_file({k: v for k, v in _tensors(path).items() if k != "lm_head.weight"}, str(path))


def _one_value_changed(path: Path) -> None:
    tensors = _tensors(path)
    tensors["model.norm.weight"][0] += 1.0
    save_file(tensors, str(path))


@pytest.mark.parametrize(
    ("edit", "mismatch"),
    [
        (_empty, lambda e: 2 * e.tensor_bytes),  # nothing exported, every tensor missing
        (_without_lm_head, lambda e: 2 * 4 * 64 * 16),  # short by it, and missing it
        (_one_value_changed, lambda e: 4 * 16),  # the tensor whose bytes differ
    ],
    ids=["empty-export", "lm-head-dropped", "one-value-changed"],
)
def test_the_export_mismatch_counts_what_is_wrong(loop_checkpoint, monkeypatch, edit, mismatch):
    expected = _expected(_tiny())
    monkeypatch.setattr(gate, "run_trainer", _export_then(edit))
    r = gate.export_mismatch(ROOT, loop_checkpoint, expected)
    assert r["tensor_bytes_mismatch"] == mismatch(expected), r


def test_an_export_refused_by_the_cli_counts_as_empty(copy):
    _flip_a_model_byte(copy)
    expected = _expected(_tiny())
    r = gate.export_mismatch(ROOT, copy, expected)
    assert r["tensor_bytes_mismatch"] == 2 * expected.tensor_bytes
    assert "trainer export exit 1" in r["problems"][0]


def test_only_a_step_directory_with_a_manifest_is_an_artifact(loop_checkpoint, tmp_path):
    assert gate.is_checkpoint_dir(loop_checkpoint) is None
    assert "not a directory" in gate.is_checkpoint_dir(loop_checkpoint / "model.safetensors")
    assert "step-NNNNNNNN" in gate.is_checkpoint_dir(loop_checkpoint.parent)
    (tmp_path / "step-00000002").mkdir()
    assert "manifest.json" in gate.is_checkpoint_dir(tmp_path / "step-00000002")


def test_the_contract_table_has_the_contracts_numbers():
    e = gate.contract_370m()
    assert (len(e.shapes), e.parameters, e.tensor_bytes) == (219, 373_509_120, 1_494_036_480)
    assert e.shapes == parameter_shapes(preset("370m"))  # the code agrees with the table
