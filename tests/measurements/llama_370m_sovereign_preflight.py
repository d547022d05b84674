"""Measurement of GATE-ARCH-370M-011 (contracts/llama-370m-sovereign-v1.yaml): a training
run whose tokenizer disagrees with the model's vocabulary is refused before its first step,
fresh or resumed.

Written from FALSIFY-ARCH-370M-011's rule, independently of the bound test: byte-level
BPE tokenizers of exactly 50256 and 50258 entries (and 512/513 for the resume case), a
small corpus encoded with each by the project's encoder (in this process: a `trainer data
encode` process under a mutant imported the whole loop, 3 s each, eight times an audit),
and `trainer apply` in a fresh process against the 370M preset. A run counts as started
when it exits 0 or leaves anything new or changed under its run directory; a refusal must
also name both sizes.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gates.audit.bound_tests import portable
from gates.measure import GateContext, Measurement, measures
from gates.provenance.evidence import sha256_of

# The CLI, with $SHIPGATE_MUTANT applied when set (never in a promotion): how a seeded
# defect is shown to move this measurement.
_TRAINER = (
    "import sys; from pathlib import Path; from gates import mutants; "
    "mutants.apply_from_env(Path.cwd()); from trainer.cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)
MODEL_VOCAB = 50257  # the 370M preset (INV-ARCH-370M-006)
FINDINGS = 1  # trainer/exit_codes.py: an input that fails its checks, nothing written
TIMEOUT_S = 900
POLL_S = 0.05


def _trainer(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _TRAINER, *args],
        cwd=root, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip


def _fresh_run(root: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    """`trainer` with ``args``, stopped the moment it has started the fresh run whose
    directory is ``out`` (``out`` exists: started, whatever it would do next). Under a
    mutant that lets a mismatched 370M run start, the rest of the run (the model built,
    a step, an evaluation) cost the audit 10-15 s a run and decides nothing. A run that
    never starts is waited for, as _trainer waits."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _TRAINER, *args], cwd=root, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=err, text=True, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while proc.poll() is None and not out.exists():
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(proc.args, TIMEOUT_S)
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:  # started (or out of time): the group, its children too
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        err.seek(0)
        return subprocess.CompletedProcess(proc.args, proc.returncode, "", err.read())


def _tokenizer(directory: Path, entries: int) -> Path:
    """A byte-level BPE of exactly ``entries`` tokens: <|endoftext|>, the 256 bytes, then
    merges of byte pairs."""
    from trainer.tokenizer.model import ByteLevelBPE  # noqa: PLC0415
    from trainer.tokenizer.pretokenize import BYTE_TO_CHAR  # noqa: PLC0415

    eot = "<|endoftext|>"
    alphabet = [BYTE_TO_CHAR[b] for b in range(256)]
    merges = tuple(itertools.islice(itertools.product(alphabet, repeat=2), entries - 257))
    ByteLevelBPE((eot, *alphabet, *(a + b for a, b in merges)), merges, (eot,)).save(directory)
    return directory


def _data(root: Path, corpus: list[Path], entries: int) -> tuple[Path, Path]:
    from trainer.data.encode import encode_corpus  # noqa: PLC0415

    tokenizer = _tokenizer(root / "tokenizer", entries)
    encode_corpus(corpus, tokenizer, root / "shards", val_fraction=0.25, workers=1, force=True)
    return root / "shards", tokenizer


def _config(
    path: Path, shards: Path, tokenizer: Path, out: Path, model: list[str], **train
) -> Path:
    training = {"epochs": 50, "max_steps": 1, "warmup_steps": 0, "eval_interval": 1,
                "save_interval": 1, "force_token_budget": "true"}  # fmt: skip
    training |= {"output_dir": str(out), **train}
    lines = ["name: vocab-preflight", "model:", *model, "data:", f"  shards: {shards}",
             f"  tokenizer: {tokenizer}", "  micro_batch: 1", "  seq_len: 16", "optimizer:",
             "  name: adamw", "  lr: 3.0e-4", "training:",
             *(f"  {k}: {v}" for k, v in training.items())]  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _snapshot(directory: Path) -> str | None:
    return sha256_of(directory)[0] if directory.exists() else None


def _case(done: subprocess.CompletedProcess, before: str | None, out: Path, sizes: tuple) -> dict:
    changed = _snapshot(out) != before
    named = all(str(s) in done.stderr for s in sizes)
    started = done.returncode == 0 or changed
    # The documented refusal: exit FINDINGS with an error line. A traceback (an unexpected
    # exception also exits 1), a signal or another status is a crash, not a refusal.
    documented = done.returncode == FINDINGS and "Traceback (most recent call last)" not in (
        done.stderr
    )
    return {
        "exit": done.returncode,
        "run_directory_changed": changed,
        "both_sizes_named": named,
        "started": started,
        "crashed": not started and not documented,
        "message": _last_line(done.stderr),
    }


def _last_line(stderr: str) -> list[str]:
    """The trainer's last stderr line, as evidence may record it: with no path of this
    machine (the runs live in a temporary directory; pv refuses an absolute path)."""
    lines = stderr.strip().splitlines()[-1:]
    return [portable(line, Path.cwd()) for line in lines]


def _matched(done: subprocess.CompletedProcess) -> dict:
    """A run whose vocabularies agree: it must train (exit 0)."""
    return {
        "exit": done.returncode,
        "refused": done.returncode != 0,
        "message": _last_line(done.stderr),
    }


@measures("GATE-ARCH-370M-011")
def mismatched_runs_started(ctx: GateContext) -> Measurement:
    cases: dict[str, dict] = {}
    matched: dict[str, dict] = {}  # the positive control: runs that must not be refused
    with tempfile.TemporaryDirectory(prefix="gate-arch-011-") as tmp:
        root = Path(tmp)
        corpus = []
        for i in range(8):
            path = root / "corpus" / f"doc{i}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"document {i}: the quick brown fox jumps over the lazy dog. " * 20)
            corpus.append(path)
        # A fresh 370M run with a tokenizer one entry short or one entry over.
        for entries in (MODEL_VOCAB - 1, MODEL_VOCAB + 1):
            shards, tokenizer = _data(root / f"v{entries}", corpus, entries)
            out = root / f"run-{entries}"
            cfg = _config(root / f"370m-{entries}.yaml", shards, tokenizer, out,
                          ["  preset: 370m"])  # fmt: skip
            done = _fresh_run(ctx.root, out, "apply", str(cfg), "--device", "cpu")
            cases[f"370m with {entries} tokens"] = _case(done, None, out, (MODEL_VOCAB, entries))
        # A resume after the tokenizer and shards were replaced by ones of another size.
        tiny = ["  preset: tiny", "  architecture:", "    vocab_size: 512"]
        shards, tokenizer = _data(root / "resume", corpus, 512)
        out = root / "run-resume"
        cfg = _config(root / "tiny.yaml", shards, tokenizer, out, tiny, max_steps=4,
                      warmup_steps=0, save_interval=2, eval_interval=100)  # fmt: skip
        first = _trainer(ctx.root, "apply", str(cfg), "--device", "cpu")
        matched["fresh tiny run, 512 / 512"] = _matched(first)
        if first.returncode == 0:
            # The same resumes with the vocabulary unchanged, each in a copy of the run.
            for resume in ("latest", "step-00000002"):
                copy = root / f"matched-{resume}"
                shutil.copytree(out, copy)
                again = _config(root / f"tiny-{resume}.yaml", shards, tokenizer, copy, tiny,
                                max_steps=6, warmup_steps=0, save_interval=2,
                                eval_interval=100)  # fmt: skip
                where = resume if resume == "latest" else str(copy / "checkpoints" / resume)
                done = _trainer(ctx.root, "apply", str(again), "--device", "cpu",
                                "--resume", where, "--resume-other-run")  # fmt: skip
                label = "latest" if resume == "latest" else "step 2"
                matched[f"resume {label}, 512 / 512"] = _matched(done)
            cfg = _config(root / "tiny.yaml", shards, tokenizer, out, tiny, max_steps=8,
                          warmup_steps=0, save_interval=2, eval_interval=100)  # fmt: skip
            _data(root / "resume", corpus, 513)  # same paths, another vocabulary
            for resume in ("latest", str(out / "checkpoints" / "step-00000002")):
                before = _snapshot(out)
                done = _trainer(ctx.root, "apply", str(cfg), "--device", "cpu",
                                "--resume", resume, "--resume-other-run")  # fmt: skip
                label = f"resume {'latest' if resume == 'latest' else 'step 2'} with 513 tokens"
                cases[label] = _case(done, before, out, (512, 513))
    started = sum(c["started"] for c in cases.values())
    unnamed = sum(not c["both_sizes_named"] for c in cases.values())
    return Measurement(
        values={
            "mismatched_runs_started": (started, "runs"),
            "refusals_not_naming_both_sizes": (unnamed, "runs"),
            # A refusal by crash (traceback, signal, a status other than 1) is no refusal.
            "refusals_by_crash": (sum(c["crashed"] for c in cases.values()), "runs"),
            "mismatched_runs_checked": (len(cases), "runs"),
            # The other side: runs whose vocabularies agree, refused. Refusing every run
            # scores 0 started mismatched runs; this counts it.
            "matched_runs_refused": (sum(m["refused"] for m in matched.values()), "runs"),
        },
        workload=(
            "`trainer apply` in fresh processes: the 370M preset (vocab 50257) with byte-level "
            "BPE tokenizers of 50256 and 50258 entries and shards encoded with each; then a "
            "tiny model trained 4 steps with a 512-entry tokenizer whose tokenizer and shards "
            "are replaced by 513-entry ones, resumed from latest and from step 2 (with "
            "--resume-other-run, so only the vocabulary check can refuse). Started = exit 0 "
            "or anything new or changed under the run directory; a refusal by crash = not "
            "started, but a traceback or a status other than 1. Positive control: the tiny "
            "512/512 run itself and, in copies of it, the same two resumes to step 6 with the "
            "512-entry tokenizer, each of which must exit 0."
        ),
        parameters={"cases": cases, "matched": matched},
    )
