"""`trainer pipeline`: the main job end to end, and its reuse of finished stages."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from trainer import exit_codes
from trainer.cli import main
from trainer.config.load import load_config
from trainer.pipeline import run as pipeline_run
from trainer.pipeline.state import code_fingerprint, project_fingerprint
from trainer.runfiles.names import PIPELINE_STATE_FILE

STDLIB = Path(sysconfig.get_paths()["stdlib"])
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The .py files of two stdlib packages (~0.5 MB of real code: V = 512 trains in ~1 s)."""
    out = tmp_path_factory.mktemp("corpus")
    for package in ("json", "email"):
        for source in sorted((STDLIB / package).rglob("*.py")):
            target = out / package / source.relative_to(STDLIB / package)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return out


def tiny_config(path: Path, *, max_steps: int = 12, save_interval: int = 6) -> Path:
    path.write_text(
        "\n".join(
            [
                "name: pipeline-test",
                "model:",
                "  preset: tiny",
                "  architecture:",
                "    vocab_size: 512",
                "    hidden_size: 32",
                "    intermediate_size: 64",
                "    num_attention_heads: 2",
                "    num_key_value_heads: 1",
                "data:",
                "  shards: elsewhere/data        # replaced by the run directory's",
                "  tokenizer: elsewhere/tokenizer",
                "  micro_batch: 4",
                "  seq_len: 64",
                "optimizer:",
                "  name: adamw",
                "  lr: 3.0e-3",
                "training:",
                "  epochs: 1",
                f"  max_steps: {max_steps}",
                f"  warmup_steps: {max_steps // 10}",
                "  eval_interval: 6",
                "  eval_tokens: 4096",
                f"  save_interval: {save_interval}",
                "  output_dir: elsewhere/train",
                "  force_token_budget: true",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return path


def pipeline_argv(config: Path, out: Path, corpus: Path, *extra: str) -> list[str]:
    return ["pipeline", "--config", str(config), "--out", str(out), "--device", "cpu",
            "--input", str(corpus), "--no-gates", *extra]  # fmt: skip


ARTIFACT_STAGES = ("tokenizer", "data", "train", "export", "baseline", "plots")


def stage_lines(text: str, stages: tuple[str, ...] = ARTIFACT_STAGES) -> dict[str, str]:
    """stage -> 'reused' or 'done' from the pipeline's per-stage outcome lines (of the
    artifact stages unless ``stages`` names others; a line that says "skipped" reads
    "done": the gate stage under --no-gates)."""
    out = {}
    for line in text.splitlines():
        name, sep, rest = line.strip().partition(": ")
        if sep and name in stages:
            out[name] = "reused" if rest.startswith("reused") else "done"
    return out


def run_pipeline(capsys, argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, corpus):
    """One pipeline run, shared by the tests that only read it or copy it."""
    base = tmp_path_factory.mktemp("pipeline")
    config = tiny_config(base / "tiny.yaml")
    out = base / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", *pipeline_argv(config, out, corpus)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return config, out, proc.stdout, corpus


def test_a_run_makes_every_artifact_and_a_summary(first_run):
    _, out, stdout, _ = first_run
    assert set(stage_lines(stdout).values()) == {"done"}
    stages = ["tokenizer", "data", "train", "export", "baseline", "plots", "gates", "report"]
    headers = re.findall(r"^\[(\d+)/(\d+)\] (\w+)$", stdout, flags=re.MULTILINE)
    assert headers == [(str(i), "8", name) for i, name in enumerate(stages, start=1)]
    for path in ("tokenizer/tokenizer.json", "data/manifest.json", "run.yaml",
                 "train/metrics.jsonl", "export/model.safetensors", "baseline.json",
                 "plots/loss.png", "plots/loss.svg", "summary.json", "pipeline.json"):  # fmt: skip
        assert (out / path).is_file(), path
    summary = json.loads((out / "summary.json").read_text())
    assert summary["tokenizer"]["vocab_size"] == 512
    assert summary["training"]["steps"] == 12
    # a CPU run: its median step's share of this CPU's measured float32 matmul peak
    assert summary["training"]["median_peak_fraction"] > 0
    assert summary["training"]["matmul_peak_flops"] > 0
    assert "tokens/s median, " in stdout
    assert "of this CPU's measured float32 matmul peak (" in stdout
    assert summary["checkpoint"]["path"].endswith("step-00000012")
    assert summary["checkpoint"]["bytes"] > summary["export"]["bytes"] > 0
    base = summary["baseline"]
    # one target set for both models, and the trigram saw exactly the 12 x 4 sequences
    assert base["validation"]["targets"] == base["validation"]["sequences"] * 64
    assert base["kn_trigram"]["training_sequences"] == 12 * 4
    assert base["ratio"] == pytest.approx(
        base["model"]["perplexity"] / base["kn_trigram"]["perplexity"]
    )
    # run.yaml is the user's config with this run directory's paths
    run_yaml = (out / "run.yaml").read_text()
    assert f"shards: {out / 'data'}" in run_yaml and "elsewhere" not in run_yaml.split("\n", 1)[1]
    assert "validation  perplexity" in stdout and "checkpoint  " in stdout
    # the training run recorded itself in its store, as it ended
    run_id = json.loads((out / "train/run_manifest.json").read_text())["run_id"]
    assert summary["run"] == {"run_id": run_id, "store": str(out / "train" / "runs.db")}
    assert f"`trainer runs show {run_id[:8]}`" in stdout
    store = sqlite3.connect(f"{(out / 'train/runs.db').as_uri()}?mode=ro", uri=True)
    try:
        assert store.execute("SELECT count(*), max(step) FROM metrics").fetchone() == (12, 12)
        assert store.execute("SELECT status FROM runs").fetchone() == ("finished",)
    finally:
        store.close()


def test_the_model_loss_in_the_summary_is_the_checkpoint_evaluated(first_run):
    """baseline.json's model loss equals the loop's own validation loss at the last step
    when both score the same set: the run evaluates at step 12, on the val split's first
    4,096 targets or all of them (this corpus's val split is smaller)."""
    _, out, _, _ = first_run
    records = [json.loads(line) for line in (out / "train/metrics.jsonl").read_text().splitlines()]
    loop_val = [r["val_loss"] for r in records if "val_loss" in r][-1]
    baseline = json.loads((out / "baseline.json").read_text())
    assert 0 < baseline["validation"]["targets"] <= 4096
    assert baseline["model"]["loss"] == pytest.approx(loop_val, rel=1e-5)


def test_a_second_run_reuses_every_stage_and_says_the_same(first_run, capsys):
    config, out, _, corpus = first_run
    before = json.loads((out / "summary.json").read_text())
    status, stdout, _ = run_pipeline(capsys, pipeline_argv(config, out, corpus))
    assert status == 0
    assert set(stage_lines(stdout).values()) == {"reused"}
    after = json.loads((out / "summary.json").read_text())
    for key in ("tokenizer", "data", "training", "baseline", "checkpoint", "export", "plots"):
        assert after[key] == before[key], key


@pytest.mark.slow
def test_a_tampered_output_is_made_again(first_run, capsys):
    config, out, _, corpus = first_run
    model = out / "export" / "model.safetensors"
    good = model.read_bytes()
    model.write_bytes(good[:-1] + bytes([good[-1] ^ 0xFF]))
    status, stdout, _ = run_pipeline(capsys, pipeline_argv(config, out, corpus))
    assert status == 0
    stages = stage_lines(stdout)
    assert stages["export"] == "done" and stages["train"] == "reused"
    assert model.read_bytes() == good  # the export is a function of the checkpoint


@pytest.mark.parametrize("damage", ["config.json deleted", "tokenizer.json garbled"])
@pytest.mark.slow
def test_an_export_missing_or_garbling_any_file_is_made_again(first_run, capsys, damage):
    """The export stage's reuse check covers every file it made, not only the weights."""
    config, out, _, corpus = first_run
    assert run_pipeline(capsys, pipeline_argv(config, out, corpus))[0] == 0
    export = out / "export"
    made = {p.name: p.read_bytes() for p in export.iterdir()}
    if damage == "config.json deleted":
        (export / "config.json").unlink()
    else:
        (export / "tokenizer.json").write_text("garbage")
    status, stdout, err = run_pipeline(capsys, pipeline_argv(config, out, corpus))
    assert status == 0, err
    assert stage_lines(stdout)["export"] == "done", f"{damage}: export reused"
    assert {p.name: p.read_bytes() for p in export.iterdir()} == made


@pytest.mark.slow
def test_a_changed_config_redoes_training_and_reuses_tokenizer_and_shards(
    first_run, tmp_path, capsys
):
    _, first, _, corpus = first_run
    out = tmp_path / "run"  # a copy: the shared first run stays the 12-step run it was
    shutil.copytree(first, out, symlinks=True)
    config = tiny_config(tmp_path / "tiny.yaml", max_steps=6)
    status, stdout, _ = run_pipeline(capsys, pipeline_argv(config, out, corpus))
    assert status == 0
    stages = stage_lines(stdout)
    assert stages["tokenizer"] == stages["data"] == "reused"
    assert stages["train"] == stages["export"] == stages["baseline"] == "done"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["training"]["steps"] == 6
    steps = [json.loads(x)["step"] for x in (out / "train/metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 7))  # the old run's directory was replaced, not appended


@pytest.mark.slow
def test_a_refused_config_keeps_the_finished_training_and_leaves_no_summary_of_it(
    first_run, tmp_path, capsys
):
    """A rerun whose config the step algebra refuses: the finished training, its record
    and its files stay as they were (a second run with the first config reuses it), and
    the last run's summary and report are cleared - deleted when they are the pipeline's
    bytes, moved aside when edited since - so nothing in the run directory reads as this
    run having finished."""
    config, first, _, corpus = first_run
    out = tmp_path / "run"
    shutil.copytree(first, out, symlinks=True)
    summary = out / "summary.json"
    edited = summary.read_bytes() + b"\n"  # a user's edit: not the bytes the pipeline wrote
    summary.write_bytes(edited)
    report = out / "report.html"
    assert report.is_file()
    train_before = _files(out / "train")
    aside_before = {p.name for p in out.iterdir() if "superseded" in p.name}  # other tests'
    record_before = json.loads((out / PIPELINE_STATE_FILE).read_text())["stages"]["train"]
    refused = tiny_config(tmp_path / "refused.yaml", max_steps=100_000)  # > 1 epoch of steps

    status, stdout, err = run_pipeline(capsys, pipeline_argv(refused, out, corpus))

    assert status == exit_codes.FINDINGS, err
    assert "stage train:" in err and "the step algebra refuses this run" in err
    assert "INV-CFG-002" in err  # the finding that says why, shown once
    assert err.count("INV-CFG-002") == 1
    assert _files(out / "train") == train_before
    assert json.loads((out / PIPELINE_STATE_FILE).read_text())["stages"]["train"] == record_before
    assert not summary.exists() and not report.exists()
    aside = sorted({p.name for p in out.iterdir() if "superseded" in p.name} - aside_before)
    assert aside == ["summary.json.superseded-1"], aside  # the report was the pipeline's
    assert (out / aside[0]).read_bytes() == edited
    assert "moved summary.json aside to summary.json.superseded-1" in stdout

    status, stdout, err = run_pipeline(capsys, pipeline_argv(config, out, corpus))
    assert status == 0, err
    assert set(stage_lines(stdout).values()) == {"reused"}
    assert json.loads(summary.read_text())["training"]["steps"] == 12 and report.is_file()


@pytest.mark.slow
def test_an_interrupted_training_stage_is_resumed(tmp_path, corpus):
    config = tiny_config(tmp_path / "tiny.yaml", max_steps=80, save_interval=2)
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "trainer", *pipeline_argv(config, out, corpus)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = out / "train" / "checkpoints"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(checkpoints.glob("step-0000001*")):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(checkpoints.glob("step-*")), "the run was killed before any checkpoint"
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming the interrupted run" in done.stdout
    stages = stage_lines(done.stdout)
    assert stages["tokenizer"] == stages["data"] == "reused"
    steps = [json.loads(x)["step"] for x in (out / "train/metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 81))


# ---------------------------------------------------------------- bad input
def test_a_missing_config_is_refused(tmp_path, capsys, corpus):
    argv = pipeline_argv(tmp_path / "nope.yaml", tmp_path / "r", corpus)
    status, _, err = run_pipeline(capsys, argv)
    assert status == 1 and "nope.yaml: no such config file" in err
    assert not (tmp_path / "r").exists()


def test_an_out_path_that_is_a_file_is_refused(tmp_path, capsys, corpus):
    config = tiny_config(tmp_path / "tiny.yaml")
    target = tmp_path / "file"
    target.write_text("mine")
    status, _, err = run_pipeline(capsys, pipeline_argv(config, target, corpus))
    assert status == 1 and "is not a directory" in err
    assert target.read_text() == "mine"


@pytest.mark.parametrize("where", ["out in input", "out in input via a link", "input in out"])
def test_a_run_directory_and_a_corpus_one_inside_the_other_are_refused(tmp_path, capsys, where):
    """A run directory inside the corpus would be read as corpus (pipeline.json first, its
    shards next time); a corpus inside the run directory is the pipeline's to replace.
    Refused before anything is written, neither tree touched."""
    config = tiny_config(tmp_path / "tiny.yaml")
    texts = tmp_path / "run" / "texts" if where == "input in out" else tmp_path / "texts"
    texts.mkdir(parents=True)
    (texts / "a.py").write_text("print('a')\n" * 50)
    out = {
        "out in input": texts / "run",
        "out in input via a link": tmp_path / "link" / "run",
        "input in out": tmp_path / "run",
    }[where]
    (tmp_path / "link").symlink_to(texts)
    before = _files(tmp_path)

    status, _, err = run_pipeline(capsys, pipeline_argv(config, out, texts))

    assert status == exit_codes.FINDINGS
    inside = "--input" if where == "input in out" else "--out"
    assert f"trainer pipeline: error: {inside} " in err and "lies inside" in err
    assert err.rstrip().endswith("nothing written")
    assert _files(tmp_path) == before  # no run directory, no lock file, no pipeline.json


def test_side_by_side_paths_are_apart_whatever_their_names(tmp_path):
    """Compared by path component: corpus-run beside corpus is not inside it."""
    corpus, run = tmp_path / "corpus", tmp_path / "corpus-run"
    assert pipeline_run.inputs_overlap(run, (corpus,)) is None
    assert pipeline_run.inputs_overlap(corpus, (run,)) is None
    assert pipeline_run.inputs_overlap(corpus, (tmp_path / "other", corpus)) is not None
    assert pipeline_run.inputs_overlap(corpus / "." / "sub" / "..", (corpus,)) is not None


def test_a_damaged_pipeline_file_is_refused_and_left_alone(tmp_path, capsys, corpus):
    config = tiny_config(tmp_path / "tiny.yaml")
    out = tmp_path / "run"
    out.mkdir()
    (out / PIPELINE_STATE_FILE).write_text("{not json")
    status, _, err = run_pipeline(capsys, pipeline_argv(config, out, corpus))
    assert status == 1 and f"{out / PIPELINE_STATE_FILE}: not readable as JSON" in err
    assert (out / PIPELINE_STATE_FILE).read_text() == "{not json"
    assert sorted(p.name for p in out.iterdir()) == [PIPELINE_STATE_FILE]


def test_an_invalid_config_trains_nothing(tmp_path, capsys, corpus):
    config = tiny_config(tmp_path / "tiny.yaml")
    config.write_text(config.read_text().replace("micro_batch: 4", "micro_batch: -4"))
    status, _, err = run_pipeline(capsys, pipeline_argv(config, tmp_path / "run", corpus))
    assert status == 1 and "invalid config" in err and "micro_batch" in err
    assert not (tmp_path / "run" / "tokenizer").exists()


def test_a_corpus_file_that_is_not_utf8_ends_the_tokenizer_stage_naming_it(tmp_path, corpus):
    """The user's error, not a traceback: the stage, the file and the byte; exit 1, and no
    tokenizer, shards or training. A subprocess, so that an error let through fails an
    assertion (on its traceback) rather than this test."""
    bad = tmp_path / "corpus"
    shutil.copytree(corpus / "json", bad / "json")
    (bad / "json" / "latin1.py").write_bytes(b"x = 1\n# caf\xe9\n")
    config = tiny_config(tmp_path / "tiny.yaml")
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "trainer", *pipeline_argv(config, out, bad)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    said = f"stage tokenizer: {bad / 'json' / 'latin1.py'}: not UTF-8 (byte offset 11)"
    assert said in proc.stderr, proc.stderr[-2000:]
    assert not any((out / name).exists() for name in ("tokenizer", "data", "train"))


# ---------------------------------------------------------------- what it may touch (issue 31)
def test_an_out_holding_files_it_did_not_write_is_refused_with_nothing_touched(
    tmp_path, capsys, corpus
):
    """`mkdir -p X/train; echo k > X/train/f; trainer pipeline --out X` once deleted f."""
    config = tiny_config(tmp_path / "tiny.yaml")
    out = tmp_path / "run"
    (out / "train").mkdir(parents=True)
    (out / "train" / "f").write_text("k")
    (out / "notes.txt").write_text("mine")
    before = _entries(out)
    status, _, err = run_pipeline(capsys, pipeline_argv(config, out, corpus))
    assert status == 1, err
    assert "holds files the pipeline did not write (notes.txt, train)" in err, err
    assert "--force" in err
    assert _entries(out) == before, "a refused pipeline wrote or removed something"


@pytest.mark.slow
def test_force_moves_the_files_it_did_not_write_aside_and_deletes_none(tmp_path, capsys, corpus):
    config = tiny_config(tmp_path / "tiny.yaml", max_steps=2, save_interval=2)
    out = tmp_path / "run"
    (out / "train").mkdir(parents=True)
    (out / "train" / "f").write_text("k")
    status, stdout, err = run_pipeline(capsys, pipeline_argv(config, out, corpus, "--force"))
    assert status == 0, err
    moved = out / "before-pipeline-1" / "train" / "f"
    assert moved.is_file() and moved.read_text() == "k", "the user's file is gone"
    assert f"moved 1 file(s) of {out} into {out / 'before-pipeline-1'}" in stdout
    assert (out / "train" / "checkpoints" / "step-00000002").is_dir()


@pytest.mark.slow
def test_a_stage_whose_inputs_changed_moves_its_old_output_aside(tmp_path, capsys, corpus):
    """Another config retrains: the first run's checkpoints are kept as train.superseded-1,
    and the line says so. An export that is exactly what the stage left is made again in
    its place (nothing of anyone else's in it)."""
    out = tmp_path / "run"
    first = tiny_config(tmp_path / "a.yaml", max_steps=4, save_interval=2)
    assert run_pipeline(capsys, pipeline_argv(first, out, corpus))[0] == 0
    old_train = _entries(out / "train")
    second = tiny_config(tmp_path / "b.yaml", max_steps=2, save_interval=2)
    status, stdout, err = run_pipeline(capsys, pipeline_argv(second, out, corpus))
    assert status == 0, err
    assert "moved train aside to train.superseded-1" in stdout and "nothing was deleted" in stdout
    assert _entries(out / "train.superseded-1") == old_train
    assert not (out / "export.superseded-1").exists(), "its own export was kept aside"
    (out / "export" / "mine.txt").write_text("a file of the user's in the export")
    status, stdout, err = run_pipeline(capsys, pipeline_argv(first, out, corpus))
    assert status == 0, err
    assert (out / "export.superseded-1" / "mine.txt").is_file()
    assert (out / "train.superseded-2").is_dir() and (out / "train.superseded-1").is_dir()


@pytest.mark.slow
def test_a_later_stop_after_continues_the_run_or_an_earlier_one_sets_it_aside(
    tmp_path, capsys, corpus
):
    """A re-run with another --stop-after once deleted the run: a longer one continues it from
    its newest checkpoint (every step once), a shorter one keeps it as train.superseded-1."""
    config = tiny_config(tmp_path / "tiny.yaml", max_steps=12, save_interval=2)
    out = tmp_path / "run"
    assert run_pipeline(capsys, pipeline_argv(config, out, corpus, "--stop-after", "2"))[0] == 0
    status, stdout, err = run_pipeline(
        capsys, pipeline_argv(config, out, corpus, "--stop-after", "4")
    )
    assert status == 0, err
    assert "continuing the run from train/checkpoints/step-00000002 to step 4" in stdout
    assert [r["step"] for r in _records(out)] == [1, 2, 3, 4]
    status, stdout, err = run_pipeline(
        capsys, pipeline_argv(config, out, corpus, "--stop-after", "2")
    )
    assert status == 0, err
    assert "moved train aside to train.superseded-1 (it trained past step 2)" in stdout
    assert [r["step"] for r in _records(out / "train.superseded-1")] == [1, 2, 3, 4]
    assert [r["step"] for r in _records(out)] == [1, 2]


# ---------------------------------------------------------------- the gate stage
ON_THIS_RUN = "GATE-TRAIN-LOOP-015"  # run.DEMO_GATES' gate measured on the run directory


def _gate_stage(stdout: str) -> str:
    """'reused' or 'done': the gate stage's outcome line."""
    return stage_lines(stdout, ("gates",))["gates"]


def _with_gates(config: Path, out: Path, corpus: Path) -> list[str]:
    return [arg for arg in pipeline_argv(config, out, corpus) if arg != "--no-gates"]


@pytest.mark.slow
def test_the_gate_stage_checks_this_run_and_a_rerun_reuses_its_verdicts(
    first_run, tmp_path, capsys, monkeypatch
):
    """The real `gates check` of every demo gate, one on this run's directory: each reads
    PASS, exit 0, evidence in RUN/evidence/ (an artifact recorded only for the gate measured
    on the run); a second run with nothing changed serves the verdicts, measuring nothing."""
    config, first, _, corpus = first_run
    out = tmp_path / "run"
    shutil.copytree(first, out, symlinks=True)
    monkeypatch.chdir(ROOT)  # the gate stage's contracts/ is the working directory's
    status, stdout, err = run_pipeline(capsys, _with_gates(config, out, corpus))
    assert status == 0, err
    assert _gate_stage(stdout) == "done"
    checks = json.loads((out / PIPELINE_STATE_FILE).read_text())["stages"]["gates"]
    verdicts = {gate: c["verdict"] for gate, c in checks["results"]["checks"].items()}
    assert verdicts == {gate: "PASS" for gate, _ in pipeline_run.DEMO_GATES}, verdicts
    for gate, on_run in pipeline_run.DEMO_GATES:
        evidence = json.loads((out / "evidence" / f"{gate}.json").read_text())
        assert (evidence["gate"], evidence["verdict"]) == (gate, "PASS")
        assert bool(evidence["artifacts"]) == on_run, gate
    status, stdout, err = run_pipeline(capsys, _with_gates(config, out, corpus))
    assert status == 0, err
    assert _gate_stage(stdout) == "reused"


@pytest.mark.slow
def test_a_gate_that_reads_fail_fails_the_pipeline_also_when_reused(
    first_run, tmp_path, capsys, monkeypatch
):
    """A FAIL from the gate stage is exit 1 (FINDINGS) with the gate and its evidence named,
    every stage done and the summary written - and again when the next run reuses that
    verdict. Control: the same pipeline whose checks read PASS exits 0."""
    config, first, _, corpus = first_run
    monkeypatch.chdir(ROOT)
    checked = []

    def check(verdict: str):
        def fake(contracts, gate_id, artifacts, out, files, *, show):
            checked.append(gate_id)
            answer = {"gate": gate_id, "verdict": verdict if gate_id == ON_THIS_RUN else "PASS"}
            out.write_text(json.dumps(answer))
            return answer

        return fake

    for verdict, expected in (("PASS", exit_codes.OK), ("FAIL", exit_codes.FINDINGS)):
        out = tmp_path / verdict
        shutil.copytree(first, out, symlinks=True)
        monkeypatch.setattr(pipeline_run, "_check_gate", check(verdict))
        status, stdout, err = run_pipeline(capsys, _with_gates(config, out, corpus))
        assert status == expected, f"{verdict}: {err}"
        assert (out / "summary.json").is_file() and (out / "report.html").is_file()
    said = (
        f"trainer pipeline: error: gate stage: {ON_THIS_RUN} reads FAIL on this run "
        f"(evidence {out / 'evidence' / ON_THIS_RUN}.json)"
    )
    assert said in err, err
    assert (
        json.loads((out / "summary.json").read_text())["checks"][ON_THIS_RUN]["verdict"] == "FAIL"
    )
    checked.clear()
    status, stdout, err = run_pipeline(capsys, _with_gates(config, out, corpus))
    assert (_gate_stage(stdout), checked) == ("reused", [])
    assert status == exit_codes.FINDINGS and said in err, err


@pytest.mark.slow
def test_a_copied_run_directory_reuses_every_stage(first_run, tmp_path, capsys):
    """Paths are where a run is, not what it is: a copy elsewhere reuses its training
    (run.yaml is rewritten with the copy's paths) instead of deleting and retraining it."""
    config, out, _, corpus = first_run
    assert run_pipeline(capsys, pipeline_argv(config, out, corpus))[0] == 0
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(out, copy, symlinks=True)
    status, stdout, err = run_pipeline(capsys, pipeline_argv(config, copy, corpus))
    assert status == 0, err
    assert set(stage_lines(stdout).values()) == {"reused"}, stdout
    assert load_config(copy / "run.yaml").data.shards == copy / "data"


@pytest.mark.slow
def test_another_trainers_artifacts_are_made_again_and_its_training_is_kept(
    first_run, tmp_path, capsys, monkeypatch
):
    """An artifact is a function of the code that built it: in a run directory made by
    another trainer (another code fingerprint) the tokenizer, shards, export, baseline and
    plots are made again, not served; the training is kept (a run resumes across versions),
    and the shards this code makes being the same bytes, it is reused."""
    config, out, _, corpus = first_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, symlinks=True)
    status, stdout, err = run_pipeline(capsys, pipeline_argv(config, copy, corpus))
    assert status == 0, err
    assert set(stage_lines(stdout).values()) == {"reused"}, stdout  # the same code: reused
    monkeypatch.setattr(pipeline_run, "code_fingerprint", lambda: "another trainer")
    status, stdout, err = run_pipeline(capsys, pipeline_argv(config, copy, corpus))
    assert status == 0, err
    remade = {"tokenizer", "data", "export", "baseline", "plots"}
    assert stage_lines(stdout) == {stage: "done" for stage in remade} | {"train": "reused"}


def test_the_code_fingerprint_follows_every_source_file_and_nothing_else(tmp_path):
    package = tmp_path / "trainer"
    (package / "tokenizer").mkdir(parents=True)
    (package / "cli.py").write_text("MAIN = 1\n")
    (package / "tokenizer" / "_loop.c").write_text("int merge(void);\n")
    before = code_fingerprint(package)
    assert code_fingerprint(package) == before
    (package / "tokenizer" / "_loop.cpython.so").write_bytes(b"built")  # not source
    (package / "README.txt").write_text("notes")
    assert code_fingerprint(package) == before
    (package / "tokenizer" / "_loop.c").write_text("int merge(int);\n")  # a C edit
    edited_c = code_fingerprint(package)
    (package / "tokenizer" / "_loop.c").write_text("int merge(void);\n")
    assert code_fingerprint(package) == before != edited_c
    (package / "cli.py").rename(package / "main.py")  # the same bytes, another module
    renamed = code_fingerprint(package)
    (package / "tokenizer" / "extra.py").write_text("")  # a new, empty module
    added = code_fingerprint(package)
    (package / "config").mkdir()
    (package / "config" / "schema.json").write_text("{}")  # package data the code reads
    assert len({before, edited_c, renamed, added, code_fingerprint(package)}) == 5
    assert code_fingerprint() == code_fingerprint(Path(pipeline_run.__file__).parents[1])


@pytest.mark.slow
def test_sigterm_during_training_is_not_done_and_the_next_run_resumes_to_the_same_loss(
    tmp_path, corpus
):
    """A pipeline whose training a signal stopped exits 143, exports and scores nothing,
    records the stage as not done; the next run resumes it and ends on the loss an
    uninterrupted pipeline ends on, bit for bit (one machine, the same code)."""
    config = tiny_config(tmp_path / "tiny.yaml", max_steps=40, save_interval=2)
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "trainer", *pipeline_argv(config, out, corpus)]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    checkpoints = out / "train" / "checkpoints"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(checkpoints.glob("step-0000000[4-9]")):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr.decode()[-2000:]
    assert "interrupted by SIGTERM after step" in stderr.decode()
    assert not (out / "export").exists() and not (out / "baseline.json").exists()
    stages = json.loads((out / PIPELINE_STATE_FILE).read_text())["stages"]
    assert stages["train"]["status"] == "started"

    resumed = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming the interrupted run" in resumed.stdout
    straight = tmp_path / "straight"
    whole = [sys.executable, "-m", "trainer", *pipeline_argv(config, straight, corpus)]
    assert subprocess.run(whole, cwd=ROOT, capture_output=True, check=False).returncode == 0
    assert _last_loss(out) == _last_loss(straight)
    assert [r["step"] for r in _records(out)] == list(range(1, 41))


@pytest.mark.slow
def test_a_training_an_alert_stopped_exits_4_and_is_never_recorded_finished(
    tmp_path, capsys, corpus
):
    """A stop rule that fires ends the pipeline at its train stage with the trainer's alert
    status (4): the rule is named, nothing is exported or scored, the stage stays "started".
    The next run does not take the stopped training for a finished one either: it resumes,
    the rule fires again, and still nothing is exported. A positive control first: the same
    rule as a warning lets the pipeline finish."""

    def with_rule(name: str, action: str) -> Path:
        config = tiny_config(tmp_path / name)
        rule = (
            f"  alerts:\n    - when: grad_norm > 0\n      action: {action}\n      after_step: 2\n"
        )
        config.write_text(config.read_text() + "monitoring:\n" + rule, encoding="utf-8")
        return config

    warned = run_pipeline(
        capsys, pipeline_argv(with_rule("warn.yaml", "warn"), tmp_path / "w", corpus)
    )
    assert warned[0] == 0, warned[2]
    out = tmp_path / "run"
    argv = pipeline_argv(with_rule("stop.yaml", "stop"), out, corpus)
    for attempt in ("first", "again"):
        status, _, err = run_pipeline(capsys, argv)
        assert status == exit_codes.ALERT_STOPPED, f"{attempt}: {err}"
        assert "stage train:" in err and '"grad_norm > 0" (stop)' in err, err
        assert not (out / "export").exists() and not (out / "baseline.json").exists(), attempt
        stages = json.loads((out / PIPELINE_STATE_FILE).read_text())["stages"]
        assert stages["train"]["status"] == "started", attempt
    assert [r["step"] for r in _records(out)] == [1, 2, 3], "resumed at 2, stopped again at 3"


def test_a_pipeline_file_that_is_not_an_object_or_not_a_file_is_refused(tmp_path, corpus):
    """A JSON array once ended in a traceback, a FIFO in a hang: both are refused, named,
    and left as they are (a subprocess, so that either old failure fails an assertion)."""
    config = tiny_config(tmp_path / "tiny.yaml")
    out = tmp_path / "run"
    out.mkdir()
    argv = [sys.executable, "-m", "trainer", *pipeline_argv(config, out, corpus)]
    record = out / PIPELINE_STATE_FILE
    record.write_text("[]")
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"{record}: not a shipgate-pipeline file (a JSON array)" in done.stderr
    record.unlink()
    os.mkfifo(record)
    try:
        done = subprocess.run(
            argv, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("a FIFO pipeline.json blocked the pipeline") from None
    assert done.returncode == 1, done.stderr[-2000:]
    assert "a FIFO (named pipe), not a regular file" in done.stderr, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [PIPELINE_STATE_FILE]


def _entries(directory: Path) -> dict[str, str]:
    """Every entry under ``directory``: a file's content, or the kind of anything else."""
    found = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        found[rel] = path.read_text("latin-1") if path.is_file() else "dir"
    return found


def _records(run: Path) -> list[dict]:
    """The metrics of the training run in ``run`` (a pipeline's directory, or its train/)."""
    train = run if (run / "metrics.jsonl").is_file() else run / "train"
    return [json.loads(x) for x in (train / "metrics.jsonl").read_text().splitlines()]


def _last_loss(run: Path) -> float:
    return _records(run)[-1]["loss"]


def test_the_gates_stage_is_keyed_by_the_contracts_projects_code_wherever_it_runs(
    tmp_path, monkeypatch
):
    """The gates measure the project that holds the contracts: its HEAD, uncommitted changes
    (binary files by content) and untracked files key the stage whatever directory the
    pipeline runs in; ignored files and the run's own directory do not; off git (the code
    cannot be told) the key is new every run, so a verdict is never served after a change."""
    project = tmp_path / "project"
    (project / "contracts").mkdir(parents=True)
    (project / "measure.py").write_text("THRESHOLD = 1\n")
    (project / "table.bin").write_bytes(b"\0\1\2")
    (project / ".gitignore").write_text("scratch/\n")
    git = ["git", "-C", str(project), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "first"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not a git work tree: where the pipeline was started
    run_dir = project / "my-run"  # the pipeline's --out, inside the project, not ignored

    def key() -> str:
        return project_fingerprint(project / "contracts", outside=run_dir)

    first = key()
    assert first == key()  # reusable
    assert "cannot be told" not in first
    run_dir.mkdir()
    (run_dir / "pipeline.json").write_text("{}")  # the run's own outputs
    (project / "scratch").mkdir()
    (project / "scratch" / "notes.py").write_text("ignored\n")
    assert key() == first, "ignored files or the run's own directory changed the key"

    seen = {first}
    for change in (
        lambda: (project / "measure.py").write_text("THRESHOLD = 2\n"),  # a measurement edited
        lambda: (project / "table.bin").write_bytes(b"\0\1\3"),  # a binary file edited
        lambda: (project / "table.bin").write_bytes(b"\0\1\4"),  # ... and edited again
        lambda: (project / "contracts" / "new_test.py").write_text("X = 1\n"),  # untracked
        lambda: (project / "contracts" / "new_test.py").write_text("X = 2\n"),  # ... edited
    ):
        change()
        now = key()
        assert now not in seen, f"a change to the project left the key {now} as before"
        seen.add(now)
    assert project_fingerprint(elsewhere) != project_fingerprint(elsewhere)
