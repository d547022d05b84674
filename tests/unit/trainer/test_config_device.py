"""Values a run cannot honour on its device (trainer/config/device.py) are refused before
anything is written: fp16 everywhere (the loop runs no grad scaler), bf16 off CUDA. Cited
at the YAML line of training.mixed_precision with code device-unsupported, by `trainer
validate`, `trainer plan` and `trainer apply` (which leaves no output directory behind),
and by the training loop itself for a config built in code, before it builds a model or
writes a file; and, the other side, fp32 on the CPU and bf16 on CUDA are not refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tree import files_under
from tests.unit.trainer.loop_support import (  # noqa: F401 - one_thread is a fixture
    TensorSequences,
    loop_config,
    one_thread,
    random_rows,
)
from trainer import cli
from trainer.config.device import device_findings, run_device, unsupported_precision
from trainer.config.load import load_config
from trainer.config.messages import ConfigError
from trainer.config.validate import validate
from trainer.plan.sections import config_section
from trainer.train import loop
from trainer.train.apply import ApplyError, ApplyOptions, apply_config
from trainer.train.options import RunOptions

CONFIG = """\
model:
  preset: tiny
data:
  shards: {root}/data/
  tokenizer: {root}/tok/
  micro_batch: 4
  seq_len: 128
optimizer:
  lr: 3.0e-4
training:
  epochs: 2
  max_steps: 100
  warmup_steps: 10
  mixed_precision: {precision}
  output_dir: {root}/out/
  force_token_budget: true
"""
PRECISION_LINE = 14


def write_config(tmp_path: Path, precision: str) -> Path:
    path = tmp_path / f"{precision}.yaml"
    path.write_text(CONFIG.format(root=tmp_path, precision=precision))
    return path


def no_cuda() -> bool:
    return False


def has_cuda() -> bool:
    return True


# ---------------------------------------------------------------- the decision
@pytest.mark.parametrize(
    ("precision", "device", "refused"),
    [
        ("fp32", "cpu", False),
        ("fp32", "cuda", False),
        ("bf16", "cuda", False),
        ("bf16", "cpu", True),
        ("fp16", "cpu", True),
        ("fp16", "cuda", True),
    ],
)
def test_which_precision_each_device_can_honour(precision, device, refused):
    assert (unsupported_precision(precision, device) is not None) is refused


def test_auto_is_cuda_only_when_this_machine_has_it():
    assert run_device("auto", has_cuda) == "cuda" and run_device("auto", no_cuda) == "cpu"
    assert run_device("cpu", has_cuda) == "cpu" and run_device("cuda", no_cuda) == "cuda"
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        run_device("tpu")


def test_a_refusal_is_cited_at_the_key_with_its_code(tmp_path):
    cfg = load_config(write_config(tmp_path, "bf16"))
    (finding,) = device_findings(cfg, "cpu")
    assert (finding.field, finding.line, finding.column) == ("training.mixed_precision", 14, 3)
    assert (finding.code, finding.severity) == ("device-unsupported", "error")
    assert "float32" in finding.message and "fp32" in finding.hint
    assert device_findings(cfg, "cuda") == []


def test_auto_warns_about_what_only_this_machine_cannot_run(tmp_path):
    bf16 = load_config(write_config(tmp_path, "bf16"))
    (finding,) = device_findings(bf16, "auto", no_cuda)
    assert finding.severity == "warning" and "--device cuda" in finding.hint
    assert device_findings(bf16, "auto", has_cuda) == []
    # fp16 runs nowhere, so no machine makes it a mere warning.
    fp16 = load_config(write_config(tmp_path, "fp16"))
    for device, probe in (("auto", has_cuda), ("auto", no_cuda), ("cuda", no_cuda)):
        (finding,) = device_findings(fp16, device, probe)
        assert finding.severity == "error" and "grad" in finding.message


def test_only_bf16_under_auto_asks_whether_this_machine_has_cuda(tmp_path):
    # Asking imports torch, which `trainer validate` avoids unless the answer matters.
    def must_not_ask() -> bool:
        raise AssertionError("the answer does not depend on this machine")

    for precision in ("fp32", "fp16", "bf16"):
        cfg = load_config(write_config(tmp_path, precision))
        devices = ("cpu", "cuda") if precision == "bf16" else ("auto", "cpu", "cuda")
        for device in devices:
            device_findings(cfg, device, must_not_ask)


# ---------------------------------------------------------------- trainer validate
def test_validate_refuses_for_the_device_it_is_told(tmp_path, capsys):
    bf16 = write_config(tmp_path, "bf16")
    rc = cli.main(["validate", str(bf16), "--device", "cpu", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["valid"] is False and report["device"] == "cpu"
    codes = [(f["line"], f["code"]) for f in report["findings"] if f["severity"] == "error"]
    assert codes == [(PRECISION_LINE, "device-unsupported")]
    assert cli.main(["validate", str(bf16), "--device", "cuda"]) == 0
    assert f"{bf16}: valid" in capsys.readouterr().out
    rc = cli.main(["validate", str(write_config(tmp_path, "fp16")), "--device", "cuda"])
    out = capsys.readouterr().out
    assert rc == 1
    assert f":{PRECISION_LINE}:3: error training.mixed_precision: fp16 needs a gradient" in out


def test_validate_passes_fp32_for_the_cpu(tmp_path):
    findings, cfg, _ = validate(write_config(tmp_path, "fp32"), device="cpu")
    assert cfg is not None
    assert [f for f in findings if f.severity == "error"] == []


# ---------------------------------------------------------------- trainer plan
def test_plan_refuses_in_its_config_section(tmp_path):
    section, cfg = config_section(write_config(tmp_path, "bf16"), "cpu")
    assert cfg is not None and section.verdict == "FAIL"
    (finding,) = section.findings
    assert (finding.field, finding.line) == ("training.mixed_precision", PRECISION_LINE)
    section, _ = config_section(write_config(tmp_path, "bf16"), "cuda")
    assert section.verdict == "ok", section.findings


# ---------------------------------------------------------------- trainer apply
@pytest.mark.parametrize(
    ("precision", "device"), [("bf16", "cpu"), ("fp16", "cpu"), ("fp16", "auto")]
)
def test_apply_refuses_with_nothing_written(tmp_path, precision, device):
    # The fp32 twin below passes this check: the precision is the one error.
    config = write_config(tmp_path, precision)
    with pytest.raises(ApplyError, match=r"invalid config \(1 error"):
        apply_config(config, ApplyOptions(device=device))
    assert not (tmp_path / "out").exists()
    assert cli.main(["apply", str(config), "--device", device]) == 1
    assert not (tmp_path / "out").exists()


def test_apply_lets_fp32_on_the_cpu_past_the_config_check(tmp_path):
    # No shards here: the refusal that comes is the data's, so the config check passed.
    with pytest.raises(ApplyError, match=r"^data "):
        apply_config(write_config(tmp_path, "fp32"), ApplyOptions(device="cpu"))
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- the loop's own check
def _tiny_run(tmp_path, precision: str):
    """loop.train of a config built in code (no `trainer validate` in front of it) into
    tmp_path/run, checkpointing, on the CPU."""
    config = loop_config({"training.mixed_precision": precision, "training.max_steps": 2})
    data = TensorSequences(random_rows(16, 8, seed=1))
    options = RunOptions(device="cpu", out_dir=tmp_path / "run", checkpoint=True)
    return loop.train(config, data, None, options=options)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_the_loop_refuses_what_the_cpu_cannot_honour_with_nothing_built_or_written(
    tmp_path, monkeypatch, precision
):
    built = []
    monkeypatch.setattr(loop, "build_model", lambda cfg, **kw: built.append(cfg))
    with pytest.raises(ConfigError) as refused:
        _tiny_run(tmp_path, precision)
    (finding,) = refused.value.findings
    assert (finding.code, finding.field) == ("device-unsupported", "training.mixed_precision")
    assert finding.path == "<config built in code>" and finding.line is None
    assert precision in finding.render()
    assert built == [], "the model was built before the refusal"
    assert not (tmp_path / "run").exists(), files_under(tmp_path / "run")


def test_the_loop_trains_fp32_on_the_cpu(tmp_path):
    result = _tiny_run(tmp_path, "fp32")
    assert (result.steps_run, result.checkpoints) == (2, [2])
    assert (tmp_path / "run" / "run_manifest.json").is_file()
