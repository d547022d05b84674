"""Two writers on one run directory at random offsets: after both end, is every file the
first writer's, the second's refusal, or untouched? (issue 31, item 7)

    python tools/run_dir_harness.py --pairings 50 --out evidence/benchmarks/run-dir-concurrency.json
    python tools/run_dir_harness.py --pairings 4 --seed 1          # a quick look, no file

Each pairing starts writer A, waits a seeded random offset, starts writer B on the same
directory, and waits for both. Kinds, cycled:

- ``apply x apply``: two fresh `trainer apply --stop-after 60` on one --out.
- ``resume x resume``: two `trainer apply --resume latest --stop-after 60` on a run
  stopped after step 30.
- ``pipeline x pipeline``: two `trainer pipeline --stop-after 4 --no-gates` on one --out.
- ``apply x export``: `trainer apply --resume latest --stop-after 90` on a finished
  60-step run, and `trainer export` of its step-60 checkpoint into the run's own
  ``export/``.

The offset is drawn from 0 to half the time writer A takes alone (measured in the setup):
both processes spend their first seconds importing torch, so B reaches its checks and its
first writes while A is checking, training or saving - the windows where two writers can
interleave. A pairing whose writer A has already ended when B is due (A ran faster than in
the setup, which another busy process can slow 2x) has nothing side by side to judge: it
is set aside and run again in a new directory at half the offset (``tries``).

A pairing is clean when (1) each writer either succeeded or was refused cleanly - exit 1,
a message that names the other writer (the lock) or the run already there, no traceback;
(2) at least one succeeded; and (3) what is on disk is what one writer alone makes:
metrics.jsonl holds steps 1..N once each with the losses of a reference run made alone
(bit for bit: one machine, the same code), every checkpoint verifies, the run store
holds the run its manifest names, a pipeline's stages are all recorded done with their
files intact, an export holds the reference export's tensors. Anything else is corrupt.

Setup (tokenizer, shards, reference runs) takes about a minute on 2 cores; a pairing
takes 4 to 15 s. Nothing is asserted about time.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("json", "email")
KINDS = ("apply x apply", "resume x resume", "pipeline x pipeline", "apply x export")
LOCKED = "another process is writing this run directory"
ALREADY = "already holds a run"
STEPS = 60  # apply x apply, resume x resume (from step 30); apply x export resumes to 90
LONGER = 90
#: A pairing without overlap is run again at half the offset; the last try starts both at once.
MAX_TRIES = 6
PIPELINE_STEPS = 4


@dataclass
class Writer:
    argv: list[str]
    returncode: int | None = None
    stderr: str = ""
    started_at: float = 0.0
    #: Another refusal that is clean for this writer: an export's checkpoint that writer A's
    #: retention pruned before the export took the lock ("CKPT: not a directory").
    also_refused: str | None = None

    def verdict(self) -> str:
        """ok, refused (cleanly), or bad."""
        if self.returncode == 0 and "Traceback" not in self.stderr:
            return "ok"
        reasons = [LOCKED, ALREADY, *([self.also_refused] if self.also_refused else [])]
        clean = "Traceback" not in self.stderr and any(r in self.stderr for r in reasons)
        return "refused" if self.returncode == 1 and clean else "bad"


@dataclass
class Pairing:
    kind: str
    offset_s: float
    writers: list[Writer] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.problems

    def record(self) -> dict:
        return {
            "kind": self.kind,
            "offset_s": round(self.offset_s, 3),
            "verdicts": [w.verdict() for w in self.writers],
            "returncodes": [w.returncode for w in self.writers],
            "clean": self.clean,
            "problems": self.problems,
        }


def trainer(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainer", *args]


def _run(argv: list[str], cwd: Path = ROOT) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")


def run_config(path: Path, data: Path, tokenizer: Path, out: Path, max_steps: int) -> Path:
    """A tiny model saving every 3 steps (the newest 5 kept, and the best)."""
    path.write_text(
        "\n".join(
            [
                "name: run-dir-harness",
                "model:",
                "  preset: tiny",
                "  architecture:",
                "    vocab_size: 512",
                "    hidden_size: 32",
                "    intermediate_size: 64",
                "    num_attention_heads: 2",
                "    num_key_value_heads: 1",
                "data:",
                f"  shards: {data}",
                f"  tokenizer: {tokenizer}",
                "  micro_batch: 4",
                "  seq_len: 32",
                "optimizer:",
                "  name: adamw",
                "  lr: 3.0e-3",
                "training:",
                "  epochs: 10",
                f"  max_steps: {max_steps}",
                "  warmup_steps: 0",
                "  eval_interval: 3",
                "  eval_tokens: 1024",
                "  save_interval: 3",
                "  keep_checkpoints: 5",
                f"  output_dir: {out}",
                "  force_token_budget: true",
                "",
            ]
        ),
        encoding="utf-8",
    )
    return path


@dataclass
class Setup:
    """What every pairing shares: the corpus, tokenizer and shards, the config, and the
    reference results each writer's work is compared with."""

    scratch: Path
    corpus: Path
    config: Path
    reference_losses: dict[str, list[float]]  # "apply" (LONGER steps), "pipeline": alone
    half_run: Path  # a run stopped after step STEPS // 2 (resume x resume copies it)
    finished: Path  # a finished STEPS-step run (apply x export copies it)
    reference_export: dict[str, str]  # export of `finished`'s last step: file -> sha256
    alone_s: dict[str, float]  # how long writer A of each kind takes alone


def setup(scratch: Path) -> Setup:
    corpus = scratch / "corpus"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for package in PACKAGES:
        for source in sorted((stdlib / package).rglob("*.py")):
            target = corpus / package / source.relative_to(stdlib / package)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    tokenizer, data = scratch / "tokenizer", scratch / "data"
    _run(trainer("tokenizer", "train", "--input", str(corpus), "--vocab-size", "512",
                 "--out", str(tokenizer)))  # fmt: skip
    _run(trainer("data", "encode", "--tokenizer", str(tokenizer), "--input", str(corpus),
                 "--out", str(data)))  # fmt: skip
    config = run_config(scratch / "run.yaml", data, tokenizer, scratch / "unused", LONGER)
    apply = trainer("apply", str(config), "--device", "cpu", "--out")
    finished, half, longer = scratch / "finished", scratch / "half", scratch / "longer"
    alone = {
        "apply x apply": _timed(lambda: _run([*apply, str(finished), "--stop-after", str(STEPS)])),
        "resume x resume": 0.0,
        "apply x export": 0.0,
    }
    _run([*apply, str(half), "--stop-after", str(STEPS // 2)])
    resumed = scratch / "resumed"
    shutil.copytree(half, resumed)
    alone["resume x resume"] = _timed(
        lambda: _run([*apply, str(resumed), "--resume", "latest", "--stop-after", str(STEPS)])
    )
    extended = scratch / "extended"
    shutil.copytree(finished, extended)
    alone["apply x export"] = _timed(
        lambda: _run([*apply, str(extended), "--resume", "latest", "--stop-after", str(LONGER)])
    )
    _run([*apply, str(longer)])  # what a run extended to LONGER must be, bit for bit
    export = scratch / "reference-export"
    _run(trainer("export", str(_last_checkpoint(finished)), "--out", str(export)))
    piped = scratch / "pipeline-alone"
    alone["pipeline x pipeline"] = _timed(
        lambda: _run(trainer(*_pipeline_args(config, corpus, piped)))
    )
    return Setup(
        scratch=scratch,
        corpus=corpus,
        config=config,
        reference_losses={"apply": _losses(longer), "pipeline": _losses(piped / "train")},
        half_run=half,
        finished=finished,
        reference_export=_tree(export),
        alone_s=alone,
    )


def _timed(work) -> float:
    started = time.monotonic()
    work()
    return time.monotonic() - started


def _last_checkpoint(run: Path) -> Path:
    return run / "checkpoints" / f"step-{STEPS:08d}"


def _pipeline_args(config: Path, corpus: Path, out: Path) -> list[str]:
    return ["pipeline", "--config", str(config), "--out", str(out), "--input", str(corpus),
            "--device", "cpu", "--no-gates", "--stop-after", str(PIPELINE_STEPS)]  # fmt: skip


def _losses(run: Path) -> list[float]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["loss"] for line in lines]


def _tree(directory: Path) -> dict[str, str]:
    import hashlib  # noqa: PLC0415

    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _writers(kind: str, s: Setup, target: Path) -> list[list[str]]:
    apply = trainer("apply", str(s.config), "--out", str(target), "--device", "cpu")
    if kind == "apply x apply":
        return [[*apply, "--stop-after", str(STEPS)]] * 2
    if kind == "resume x resume":
        shutil.copytree(s.half_run, target, symlinks=True)
        return [[*apply, "--resume", "latest", "--stop-after", str(STEPS)]] * 2
    if kind == "pipeline x pipeline":
        return [trainer(*_pipeline_args(s.config, s.corpus, target))] * 2
    shutil.copytree(s.finished, target, symlinks=True)
    return [
        [*apply, "--resume", "latest", "--stop-after", str(LONGER)],
        trainer("export", str(_last_checkpoint(target)), "--out", str(target / "export")),
    ]


def _pruned(kind: str, argv: list[str]) -> str | None:
    """What an export says of a checkpoint that is gone: writer A took the lock first, ran,
    pruned it (keep_checkpoints) and let go, all before the export, still importing torch
    when it was started, asked for the lock. Sequential, not interleaved."""
    if kind != "apply x export" or "export" not in argv:
        return None
    return f"{argv[argv.index('export') + 1]}: not a directory"


def run_pairing(kind: str, offset_s: float, s: Setup, target: Path) -> Pairing | None:
    """Writer A, then B after ``offset_s``; None when A ended before B was due (no overlap)."""
    pairing = Pairing(kind, offset_s)
    argvs = _writers(kind, s, target)
    procs: list[subprocess.Popen] = []
    for i, argv in enumerate(argvs):
        if i:
            time.sleep(offset_s)
            if procs[0].poll() is not None:
                procs[0].communicate()
                return None
        writer = Writer(argv, started_at=time.monotonic(), also_refused=_pruned(kind, argv))
        procs.append(
            subprocess.Popen(
                argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        )
        pairing.writers.append(writer)
    for writer, proc in zip(pairing.writers, procs, strict=True):
        _, writer.stderr = proc.communicate(timeout=600)
        writer.returncode = proc.returncode
    pairing.problems = check(kind, pairing.writers, s, target)
    return pairing


def check(kind: str, writers: list[Writer], s: Setup, target: Path) -> list[str]:
    """What is wrong with the pairing's outcome: empty when it is clean (module docstring)."""
    problems = [
        f"writer {i + 1} exited {w.returncode} without a clean refusal: {w.stderr[-500:]!r}"
        for i, w in enumerate(writers)
        if w.verdict() == "bad"
    ]
    if all(w.verdict() == "refused" for w in writers):
        problems.append("both writers were refused: nobody wrote")
    if kind == "pipeline x pipeline":
        problems += _pipeline_problems(target, s)
    else:
        want = LONGER if kind == "apply x export" and writers[0].verdict() == "ok" else STEPS
        problems += _run_problems(target, s.reference_losses["apply"], want)
    exported = kind == "apply x export" and writers[1].verdict() == "ok"
    if exported and _tree(target / "export") != s.reference_export:
        problems.append(f"the export is not the reference export of step {STEPS}")
    if kind == "apply x export" and not exported and (target / "export").exists():
        problems.append("a refused export left export/ behind")
    return problems


def _run_problems(run: Path, reference: list[float], steps: int) -> list[str]:
    problems = []
    try:
        losses = _losses(run)
        records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    except (OSError, ValueError, KeyError) as exc:
        return [f"{run}/metrics.jsonl unreadable: {exc}"]
    if [r["step"] for r in records] != list(range(1, steps + 1)):
        problems.append(f"metrics.jsonl steps {[r['step'] for r in records]}, not 1..{steps}")
    elif losses != reference[:steps]:
        problems.append("metrics.jsonl losses differ from the reference run's")
    state = json.loads((run / "training_state.json").read_text())
    if state.get("status") != "finished" or state.get("last", {}).get("step") != steps:
        problems.append(f"training_state.json says {state.get('status')} at {state.get('last')}")
    problems += _checkpoint_problems(run)
    problems += _store_problems(run)
    return problems


def _checkpoint_problems(run: Path) -> list[str]:
    from trainer.checkpoint.layout import checkpoint_dirs  # noqa: PLC0415
    from trainer.checkpoint.verify import inspect_checkpoint  # noqa: PLC0415

    return [
        f"{path.name} does not verify: {'; '.join(result.problems)}"
        for path in checkpoint_dirs(run / "checkpoints")
        if not (result := inspect_checkpoint(path)).valid
    ]


def _store_problems(run: Path) -> list[str]:
    import sqlite3  # noqa: PLC0415

    manifest = json.loads((run / "run_manifest.json").read_text())
    try:
        db = sqlite3.connect(f"{(run / 'runs.db').as_uri()}?mode=ro", uri=True)
        try:
            ids = [row[0] for row in db.execute("SELECT run_id FROM runs")]
        finally:
            db.close()
    except sqlite3.Error as exc:
        return [f"runs.db unreadable: {exc}"]
    return [] if ids == [manifest["run_id"]] else [f"runs.db holds {ids}, the manifest names "
                                                   f"{manifest['run_id']}"]  # fmt: skip


def _pipeline_problems(out: Path, s: Setup) -> list[str]:
    from trainer.pipeline.state import PipelineError, PipelineState  # noqa: PLC0415

    try:
        state = PipelineState.load(out)
    except PipelineError as exc:
        return [str(exc)]
    problems = [
        f"stage {name} is {record.get('status')}"
        for name, record in state.stages.items()
        if record.get("status") != "done"
    ]
    for name, record in state.stages.items():
        if not state.done(name, record.get("key", ""), out):
            problems.append(f"stage {name}'s files are not what it recorded")
    problems += _run_problems(out / "train", s.reference_losses["pipeline"], PIPELINE_STEPS)
    return problems


def harness(pairings: int, seed: int, scratch: Path) -> dict:
    rng = random.Random(seed)
    started = time.monotonic()
    s = setup(scratch)
    setup_s = time.monotonic() - started
    results = []
    for i in range(pairings):
        kind = KINDS[i % len(KINDS)]
        offset = rng.uniform(0.0, s.alone_s[kind] / 2)
        target = scratch / "pairings" / f"{i:03d}"
        target.parent.mkdir(exist_ok=True)
        tries = 1
        while (pairing := run_pairing(kind, offset, s, target)) is None:
            if tries == MAX_TRIES:
                raise RuntimeError(f"{kind}: writer A ended before B started, even at 0 s")
            tries += 1  # writer A had ended: again, sooner, in a directory of its own
            offset = offset / 2 if tries < MAX_TRIES else 0.0
            target = scratch / "pairings" / f"{i:03d}-{tries}"
        results.append({**pairing.record(), "tries": tries})
        print(
            f"{i + 1:3d} {kind:20s} offset {offset:5.2f} s  "
            f"{'/'.join(pairing.record()['verdicts']):14s} "
            f"{'clean' if pairing.clean else 'CORRUPT: ' + '; '.join(pairing.problems)}",
            flush=True,
        )
    return {
        "pairings": results,
        "kinds": {k: sum(r["kind"] == k for r in results) for k in KINDS},
        "outcomes": {
            k: sum("/".join(r["verdicts"]) == k for r in results)
            for k in sorted({"/".join(r["verdicts"]) for r in results})
        },
        "corrupt": sum(not r["clean"] for r in results),
        "seed": seed,
        "alone_s": {k: round(v, 2) for k, v in s.alone_s.items()},
        "setup_s": round(setup_s, 1),
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairings", type=int, default=50)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="run-dir-harness-") as tmp:
        result = harness(args.pairings, args.seed, Path(tmp))
    if args.out is not None:
        from gates.provenance.evidence import git_info, host_info, utc_now  # noqa: PLC0415

        result["captured_at"] = utc_now()
        result["command"] = " ".join(
            ["python tools/run_dir_harness.py", *(argv if argv is not None else sys.argv[1:])]
        )
        result["host"] = host_info()
        result["git"] = git_info(ROOT)
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{len(result['pairings'])} pairings, {result['corrupt']} corrupt: {result['outcomes']}")
    return 1 if result["corrupt"] else 0


if __name__ == "__main__":
    sys.exit(main())
