"""`trainer plan CONFIG` as a user runs it: the seed's ALB-060 diagnosis from its v1
numbers, the v2 fix passing the algebra, the CPU quickstart passing against a real shard
directory, N counted from a real manifest, and every kind of bad input reported with its
field and line and exit 1, never a traceback."""

from __future__ import annotations

import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import cli
from trainer.data.encode import encode_corpus
from trainer.data.manifest import load_manifest
from trainer.plan import memory, timing
from trainer.tokenizer import bpe
from trainer.tokenizer.model import ByteLevelBPE
from trainer.tokenizer.pretokenize import count_words

REPO = Path(__file__).resolve().parents[2]
V1 = "configs/pretrain-350m-v1.yaml"
V2 = "configs/pretrain-350m-v2.yaml"
QUICKSTART = REPO / "configs" / "quickstart-cpu.yaml"
EOT = "<|endoftext|>"


def run_plan(capsys, *argv: object) -> tuple[int, str]:
    code = cli.main(["plan", *map(str, argv)])
    return code, capsys.readouterr().out


def run_plan_json(capsys, *argv: object) -> tuple[int, dict]:
    code, out = run_plan(capsys, *argv, "--format", "json")
    return code, json.loads(out)


def line_of(path: Path, key: str) -> int:
    """1-based line of the first ``key:`` in a YAML file (the config's own text, not a
    number copied into the test)."""
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}:", text):
            return number
    raise AssertionError(f"{key} not in {path}")


def errors(report: dict, section: str) -> list[dict]:
    return [f for f in report["sections"][section]["findings"] if f["level"] == "error"]


# ---------------------------------------------------------------- a demo-like directory
def synthetic_documents(count: int, words_per_doc: int) -> list[str]:
    rng = random.Random(5)
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9)))
        for _ in range(6000)
    ]
    return [" ".join(rng.choices(words, k=words_per_doc)) for _ in range(count)]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    """A working directory laid out as `make demo` leaves it (runs/demo/tokenizer with
    V = 2048, runs/demo/data), from synthetic documents: enough train sequences for the
    quickstart's 1,100 steps at 8 x 256 in one epoch, in a few seconds."""
    root = tmp_path_factory.mktemp("workdir")
    docs = synthetic_documents(130, 5000)
    model = bpe.train_fast(
        count_words(docs[:20]), vocab_size=2048, min_frequency=2, special_tokens=(EOT,)
    )
    tokenizer = root / "runs" / "demo" / "tokenizer"
    ByteLevelBPE.from_model(model).save(tokenizer)
    sources = root / "sources"
    sources.mkdir()
    files = []
    for i, doc in enumerate(docs):
        files.append(sources / f"doc{i:03d}.txt")
        files[-1].write_text(doc, encoding="utf-8")
    encode_corpus(files, tokenizer, root / "runs" / "demo" / "data", workers=1)
    return root


def quickstart_variant(directory: Path, name: str, replace: dict[str, str]) -> Path:
    """The shipped quickstart config with some lines replaced (each key must occur once)."""
    text = QUICKSTART.read_text()
    for old, new in replace.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = directory / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------- the seed (ALB-060)
def test_seed_v1_numbers_reproduce_the_43_of_5000_diagnosis(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = run_plan(capsys, V1, "--sequences", 22079, "--no-timing")
    assert code == 1
    epochs_line = line_of(REPO / V1, "epochs")
    warmup_line = line_of(REPO / V1, "warmup_steps")
    assert (
        f"{V1}:{epochs_line}: training.epochs: epochs: 1 gives 43 steps < max_steps 5000"
    ) in out
    assert "set epochs >= 117" in out
    assert f"{V1}:{warmup_line}: training.warmup_steps: warmup_steps: 2000 >= 43 reachable" in out
    assert "the learning rate peaks at 6.45e-06, 2.15 % of lr 0.0003" in out
    assert "WHAT-IF" in out and "[FAIL] step algebra (C-TRAINCFG-001)" in out


def test_seed_v1_diagnosis_in_json(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, report = run_plan_json(capsys, V1, "--sequences", 22079, "--no-timing")
    assert code == 1 and report["exit_code"] == 1 and report["verdict"] == "FAIL"
    assert report["what_if"] is True
    algebra = report["sections"]["algebra"]
    values = algebra["values"]
    assert (values["sequences"], values["sequences_source"]) == (22079, "--sequences")
    assert values["steps_per_epoch"] == 43
    assert values["reachable_steps"] == 43
    assert values["min_epochs"] == 117
    assert values["lr_max_reached"] == pytest.approx(6.45e-6, rel=1e-9)
    assert values["lr_max_reached"] / 3e-4 == pytest.approx(0.0215)
    rules = {v["rule"] for v in values["violations"]}
    assert {"INV-CFG-002", "INV-CFG-003", "INV-CFG-006"} <= rules
    epochs = next(f for f in errors(report, "algebra") if f["field"] == "training.epochs")
    assert epochs["line"] == line_of(REPO / V1, "epochs")
    # The seed's data is not here: honestly missing, with its field and line.
    data = errors(report, "data")
    assert data[0]["field"] == "data.shards" and data[0]["line"] == line_of(REPO / V1, "shards")
    assert set(report["sections"]) == {
        "config",
        "architecture",
        "parameters",
        "memory",
        "algebra",
        "data",
        "tokenizer",
        "time",
    }


def test_seed_v2_numbers_pass_the_algebra_and_fail_on_this_machine_for_honest_reasons(
    capsys, monkeypatch
):
    monkeypatch.chdir(REPO)
    code, report = run_plan_json(capsys, V2, "--sequences", 67976, "--no-timing")
    algebra = report["sections"]["algebra"]
    assert algebra["verdict"] == "warn"  # the recorded token-budget override only
    assert algebra["values"]["steps_per_epoch"] == 16994
    assert algebra["values"]["reachable_steps"] == 5000
    assert algebra["values"]["violations"] == [] and algebra["values"]["forced"] is True
    assert algebra["values"]["lr_max_reached"] == 3e-4
    assert code == 1
    failed = {k for k, s in report["sections"].items() if s["verdict"] == "FAIL"}
    assert {"data", "tokenizer"} <= failed  # the seed's paths do not exist here
    if report["sections"]["memory"]["values"]["device"] == "cpu":  # bf16 is CUDA autocast
        assert errors(report, "config")[0]["field"] == "training.mixed_precision"
        assert report["sections"]["memory"]["values"]["precision"] == "fp32"


def test_seed_v2_fits_a_24_gib_card_in_bf16_autocast(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    argv = (V2, "--sequences", 67976, "--device", "cuda", "--device-memory", "24GiB")
    _, report = run_plan_json(capsys, *argv, "--no-timing")
    mem = report["sections"]["memory"]
    assert mem["verdict"] == "ok", mem["findings"]
    assert mem["values"]["precision"] == "bf16"
    assert report["sections"]["config"]["verdict"] == "ok"
    assert mem["values"]["device_bytes"] == 24 << 30
    assert 0.5 < mem["values"]["fraction"] < 0.9
    names = [item["name"] for item in mem["values"]["items"]]
    assert "autocast_weight_copies" in names and "cross_entropy_backward" in names


# ---------------------------------------------------------------- quickstart on real shards
def quiet_enough(monkeypatch) -> None:
    """Take the estimate however noisy the machine running the suite is: these tests are
    about the plan's checks; the noise verdict has its own (tests/unit/trainer/
    test_plan_timing.py, with a fake clock)."""
    monkeypatch.setattr(timing, "NOISY_SPREAD", math.inf)
    monkeypatch.setattr(timing, "order_verdict", lambda seconds: None)
    monkeypatch.setattr(timing, "machine_load", lambda: None)


def test_quickstart_passes_every_check_against_a_real_shard_directory(
    capsys, demo_dir, monkeypatch
):
    monkeypatch.chdir(demo_dir)
    quiet_enough(monkeypatch)
    code, report = run_plan_json(capsys, QUICKSTART)
    verdicts = {k: s["verdict"] for k, s in report["sections"].items()}
    assert code == 0, verdicts
    assert all(v in ("ok", "warn") for v in verdicts.values()), verdicts
    assert report["sections"]["algebra"]["values"]["sequences_source"] == "manifest"
    assert report["sections"]["tokenizer"]["values"]["matches_shards"] is True
    time = report["sections"]["time"]
    assert time["values"]["run_seconds"] > 0 and time["values"]["step_seconds"] > 0
    assert any("1 and 2 layers" in line for line in time["details"])
    assert time["values"]["peak_fraction"] > 0 and time["values"]["matmul_peak_flops"] > 0
    assert any("measured float32 matmul peak" in line for line in time["details"])
    params = report["sections"]["parameters"]["values"]
    assert params["parameters"] == params["built_parameters"] == 988_288


def test_sequences_are_counted_from_the_real_manifest(capsys, demo_dir, monkeypatch, tmp_path):
    monkeypatch.chdir(demo_dir)
    train_tokens = load_manifest(Path("runs/demo/data"), verify=False).data["splits"]["train"]
    n = (train_tokens["tokens"] - 1) // 256
    spe = n // (8 * 3)
    assert spe > 1
    accepted = quickstart_variant(
        tmp_path,
        "exact.yaml",
        {
            "max_steps: 1100": f"max_steps: {spe}",
            "warmup_steps: 110": "warmup_steps: 0",
            "gradient_accumulation: 1": "gradient_accumulation: 3",
        },
    )
    code, report = run_plan_json(capsys, accepted, "--no-timing")
    values = report["sections"]["algebra"]["values"]
    assert (values["sequences"], values["steps_per_epoch"]) == (n, spe), values
    assert values["reachable_steps"] == spe and code == 0
    one_more = quickstart_variant(
        tmp_path,
        "one-more.yaml",
        {
            "max_steps: 1100": f"max_steps: {spe + 1}",
            "warmup_steps: 110": "warmup_steps: 0",
            "gradient_accumulation: 1": "gradient_accumulation: 3",
        },
    )
    code, out = run_plan(capsys, one_more, "--no-timing")
    assert code == 1
    assert f"epochs: 1 gives {spe} steps < max_steps {spe + 1}" in out
    assert "set epochs >= 2" in out


def test_the_time_budget_fails_a_run_that_would_take_too_long(capsys, demo_dir, monkeypatch):
    monkeypatch.chdir(demo_dir)
    quiet_enough(monkeypatch)
    code, report = run_plan_json(capsys, QUICKSTART, "--time-budget", "0.0001")
    time = report["sections"]["time"]
    assert code == 1 and time["verdict"] == "FAIL"
    assert time["findings"][0]["field"] == "training.max_steps"
    assert time["findings"][0]["line"] == line_of(QUICKSTART, "max_steps")


def test_no_measurement_is_attempted_when_the_timing_model_would_not_fit(
    capsys, demo_dir, monkeypatch
):
    monkeypatch.chdir(demo_dir)
    tiny_host = memory.DeviceMemory(1 << 20, "a 1 MiB test host")
    monkeypatch.setattr(memory, "host_available_memory", lambda: tiny_host)
    code, report = run_plan_json(capsys, QUICKSTART)
    time = report["sections"]["time"]
    assert time["verdict"] == "warn" and time["values"] == {}
    assert "not measured" in time["findings"][0]["message"]
    assert report["sections"]["memory"]["verdict"] == "FAIL" and code == 1


# ---------------------------------------------------------------- bad input
def corrupt_copy(demo_dir: Path, tmp_path: Path, damage: str) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for src in (demo_dir / "runs" / "demo" / "data").iterdir():
        (data / src.name).write_bytes(src.read_bytes())
    if damage == "shard":
        shard = data / "train-00000.bin"
        raw = bytearray(shard.read_bytes())
        raw[-1] ^= 0x01
        shard.write_bytes(bytes(raw))
    else:
        (data / "manifest.json").write_text("{ not json")
    return data


BAD_CONFIGS = {
    "yaml-syntax": ({"  micro_batch: 8": "  micro_batch: 8: 9"}, "micro_batch", None),
    "wrong-type": ({"  micro_batch: 8": "  micro_batch: eight"}, "micro_batch", "data.micro_batch"),
    "zero-size": ({"  seq_len: 256 ": "  seq_len: 0 "}, "seq_len", "data.seq_len"),
    "heads-not-dividing-hidden": (
        {"    num_attention_heads: 4": "    num_attention_heads: 3"},
        "num_attention_heads",
        "model.architecture.num_attention_heads",
    ),
    "kv-heads-not-dividing-heads": (
        {"    num_key_value_heads: 2": "    num_key_value_heads: 3"},
        "num_key_value_heads",
        "model.architecture.num_key_value_heads",
    ),
    "missing-key": ({"  max_steps: 1100\n": ""}, "training", "training.max_steps"),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_a_bad_config_is_reported_with_field_and_line(capsys, tmp_path, case):
    replace, key, field = BAD_CONFIGS[case]
    path = quickstart_variant(tmp_path, f"{case}.yaml", replace)
    code, report = run_plan_json(capsys, path, "--no-timing")
    assert code == 1
    config = report["sections"]["config"]
    assert config["verdict"] == "FAIL"
    # The finding about the broken field (a YAML syntax error has no field), at its line.
    finding = next(f for f in config["findings"] if f["field"] == field)
    assert finding["line"] == line_of(path, key), finding
    assert all(s["verdict"] == "skipped" for k, s in report["sections"].items() if k != "config")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("- model\n- data\n", "not a mapping"), ("model: {preset: tiny\n", "line")],
)
def test_a_config_that_is_no_mapping_is_a_message(capsys, tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, out = run_plan(capsys, path, "--no-timing")
    assert code == 1 and expected in out and "[FAIL] config" in out


def test_a_missing_config_file_is_a_message(capsys, tmp_path):
    code, out = run_plan(capsys, tmp_path / "nope.yaml")
    assert code == 1 and "no such file" in out


@pytest.mark.parametrize("damage", ["shard", "manifest"])
def test_a_corrupt_shard_directory_names_the_file_and_the_config_line(
    capsys, demo_dir, monkeypatch, tmp_path, damage
):
    data = corrupt_copy(demo_dir, tmp_path, damage)
    monkeypatch.chdir(demo_dir)
    path = quickstart_variant(tmp_path, "x.yaml", {"shards: runs/demo/data": f"shards: {data}"})
    code, report = run_plan_json(capsys, path, "--no-timing")
    assert code == 1
    (finding,) = errors(report, "data")
    assert (finding["field"], finding["line"]) == ("data.shards", line_of(path, "shards"))
    assert str(data) in finding["message"]
    assert ("sha256 mismatch" if damage == "shard" else "not valid JSON") in finding["message"]
    assert report["sections"]["algebra"]["verdict"] == "skipped"


def test_a_missing_data_path_fails_and_what_if_sequences_still_run_the_algebra(
    capsys, demo_dir, monkeypatch, tmp_path
):
    monkeypatch.chdir(demo_dir)
    path = quickstart_variant(tmp_path, "x.yaml", {"shards: runs/demo/data": "shards: no/such"})
    code, report = run_plan_json(capsys, path, "--no-timing", "--sequences", 40_000)
    assert code == 1
    (finding,) = errors(report, "data")
    assert "no/such does not exist" in finding["message"]
    assert finding["line"] == line_of(path, "shards")
    assert report["sections"]["algebra"]["verdict"] == "warn"  # forced token budget only
    assert report["sections"]["algebra"]["values"]["steps_per_epoch"] == 5000


def test_a_tokenizer_that_does_not_match_the_model_names_both_sizes(
    capsys, demo_dir, monkeypatch, tmp_path
):
    monkeypatch.chdir(demo_dir)
    path = quickstart_variant(tmp_path, "x.yaml", {"vocab_size: 2048 ": "vocab_size: 2000 "})
    code, report = run_plan_json(capsys, path, "--no-timing")
    assert code == 1
    (finding,) = errors(report, "tokenizer")
    assert "2000" in finding["message"] and "2048" in finding["message"]
    assert finding["field"] == "model.architecture.vocab_size"
    assert finding["line"] == line_of(path, "vocab_size")
    assert "2048" in errors(report, "data")[0]["message"]  # the shards' ids too


def test_the_installed_command_reports_bad_input_without_a_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  preset: tiny\n\tdata: 1\n")
    result = subprocess.run(
        [sys.executable, "-m", "trainer.cli", "plan", str(bad)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert f"{bad}:3: " in result.stdout


@pytest.mark.parametrize("size", ["1e309GiB", "nan", "1e30TiB"])
def test_a_device_memory_that_is_not_finite_or_past_any_device_is_a_usage_error(size):
    """Issue 31: `--device-memory 1e309GiB` was an OverflowError traceback (exit 1)."""
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "plan", str(QUICKSTART), f"--device-memory={size}"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=60,
    )
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert f"trainer plan: error: argument --device-memory: {size!r}" in result.stderr


def test_the_step_algebra_is_planned_for_the_world_size(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    config = "configs/llama-370m-8gpu.yaml"
    # 7,680,000 sequences: 15,000 steps of 512 on 8 processes, one epoch.
    _, report = run_plan_json(
        capsys, config, "--sequences", 7_680_000, "--no-timing", "--world-size", 8
    )
    algebra = report["sections"]["algebra"]
    assert algebra["verdict"] == "ok", algebra
    assert algebra["values"]["steps_per_epoch"] == 15_000
    code, report = run_plan_json(capsys, config, "--sequences", 7_680_000, "--no-timing")
    assert code == 1
    algebra = report["sections"]["algebra"]
    assert algebra["verdict"] == "FAIL"
    assert algebra["values"]["steps_per_epoch"] == 120_000  # a global batch of 64
