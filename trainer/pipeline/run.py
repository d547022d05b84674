"""The main job, stage by stage: corpus -> tokenizer -> shards -> training -> export ->
baseline -> plots -> gates -> summary.

    pipeline = Pipeline(PipelineOptions(config=Path("configs/quickstart-cpu.yaml"),
                                        out=Path("runs/demo")))
    summary = pipeline.run()

Every stage is the project's own command (trainer tokenizer train, trainer data encode,
trainer apply, trainer export, trainer plot, gates check, gates report) run in this
process, so what the pipeline does is exactly what a user can do by hand. Stages are
keyed by content (trainer/pipeline/state.py): a stage whose inputs hash as before and
whose outputs still hold the bytes it left is reused; a training stage that was
interrupted is resumed from its newest valid checkpoint (``trainer apply --resume``).

The run directory is what C-TRAINING-LOOP's checkpoint gates call a loop run directory
(run.yaml, tokenizer/, data/, train/), so `gates check GATE-TRAIN-LOOP-015 --artifact
RUN_DIR` measures this very run.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from trainer.pipeline.state import (
    PipelineError,
    PipelineState,
    file_sha256,
    files_fingerprint,
    stage_key,
)

#: Gates a run directory can discharge quickly: (gate, measured on this run?).
#: 015 is measured on this run's own checkpoint; PV-001 and TRAIN-LOOP-017 need no
#: artifact and run in about a minute together. 012-014 and 016 retrain the run or
#: fault-inject it dozens of times: minutes each, not for the first command.
DEMO_GATES = (
    ("GATE-TRAIN-LOOP-015", True),
    ("GATE-TRAIN-LOOP-017", False),
    ("GATE-PV-001", False),
)
STAGES = ("tokenizer", "data", "train", "export", "baseline", "plots", "gates", "report")


@dataclass(frozen=True)
class PipelineOptions:
    config: Path
    out: Path
    inputs: tuple[Path, ...] = ()  # corpus files/directories; () = the embedded corpus
    max_steps: int | None = None
    device: str = "auto"
    val_fraction: float = 0.02
    gates: bool = True
    contracts: Path = Path("contracts")  # where the gate stage finds contracts/*.yaml


@dataclass
class StageOutcome:
    name: str
    reused: bool
    seconds: float
    note: str = ""


@dataclass
class Pipeline:
    options: PipelineOptions
    say: Callable[[str], None] = field(default=lambda line: print(line, flush=True))
    outcomes: list[StageOutcome] = field(default_factory=list)

    # ------------------------------------------------------------ plumbing
    @property
    def out(self) -> Path:
        return self.options.out

    def _path(self, *parts: str) -> Path:
        return self.out.joinpath(*parts)

    def _rel(self, path: Path) -> str:
        return str(Path(path).relative_to(self.out))

    @contextlib.contextmanager
    def _stage(self, index: int, name: str) -> Iterator[dict]:
        """Header, timing and outcome line of one stage; the body fills ``info``."""
        self.say(f"[{index}/{len(STAGES)}] {name}")
        info: dict = {"reused": False, "note": ""}
        started = time.perf_counter()
        yield info
        seconds = time.perf_counter() - started
        self.outcomes.append(StageOutcome(name, info["reused"], seconds, info["note"]))
        verb = "reused" if info["reused"] else f"done in {_duration(seconds)}"
        self.say(f"      {name}: {verb}{' - ' + info['note'] if info['note'] else ''}")

    def _cli(self, stage: str, argv: list[str], *, ok: tuple[int, ...] = (0,)) -> int:
        from trainer.cli import main  # noqa: PLC0415 - the CLI imports every component

        status = main(argv)
        if status not in ok:
            raise PipelineError(
                f"stage {stage}: `trainer {' '.join(argv)}` exited {status}; its message is "
                "above. Fix the cause and run the pipeline again: finished stages are reused",
                status=status if status in (3, 4) else 1,  # aborted / stopped by an alert
            )
        return status

    def _input_args(self) -> list[str]:
        """--input PATH... for the tokenizer and data commands (none: the embedded corpus)."""
        return ["--input", *map(str, self.options.inputs)] if self.options.inputs else []

    # ------------------------------------------------------------ the stages
    def run(self) -> dict:
        from trainer.pipeline.summary import build_summary  # noqa: PLC0415

        started = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        state = PipelineState.load(self.out)
        cfg = _load_config(self.options.config)
        corpus = self._corpus_fingerprint()
        tokenizer_sha = self._tokenizer(state, cfg, corpus)
        data_sha = self._data(state, corpus, tokenizer_sha)
        run_yaml_sha = self._write_run_yaml(cfg)
        run_cfg = _load_config(self._path("run.yaml"))
        checkpoint, ckpt_sha = self._train(state, run_cfg, run_yaml_sha, data_sha)
        self._export(state, checkpoint, ckpt_sha)
        self._baseline(state, run_cfg, checkpoint, ckpt_sha)
        self._plots(state)
        self._gates(state, ckpt_sha)
        self._report(state)
        summary = build_summary(self.out, state, corpus, run_cfg, self.outcomes)
        summary["seconds"] = round(time.perf_counter() - started, 1)
        from trainer.train.metrics_file import atomic_write_json  # noqa: PLC0415

        atomic_write_json(self._path("summary.json"), summary)
        return summary

    def _corpus_fingerprint(self) -> dict:
        from trainer.data.commands import corpus_files  # noqa: PLC0415

        files, skipped = corpus_files(list(self.options.inputs), False)
        sha, count, size = files_fingerprint(files)
        return {"sha256": sha, "files": count, "bytes": size, "skipped": skipped}

    def _tokenizer(self, state: PipelineState, cfg, corpus: dict) -> str:
        vocab = cfg.model.vocab_size
        key = stage_key({"corpus": corpus["sha256"], "vocab_size": vocab, "min_frequency": 2})
        with self._stage(1, "tokenizer") as info:
            if state.done("tokenizer", key, self.out):
                info.update(reused=True, note=f"vocab {vocab}, same corpus")
                return state.output("tokenizer", "sha256")
            started = time.perf_counter()
            target = self._path("tokenizer")
            _remove(target)
            argv = ["tokenizer", "train", "--vocab-size", str(vocab), "--out", str(target)]
            self._cli("tokenizer", argv + self._input_args())
            sha = file_sha256(target / "tokenizer.json")
            state.record(
                "tokenizer",
                key,
                outputs={"tokenizer/tokenizer.json": sha},
                seconds=time.perf_counter() - started,
                results={"sha256": sha, "vocab_size": vocab},
            )
            info["note"] = f"vocab {vocab}"
            return sha

    def _data(self, state: PipelineState, corpus: dict, tokenizer_sha: str) -> str:
        key = stage_key(
            {
                "corpus": corpus["sha256"],
                "tokenizer": tokenizer_sha,
                "val_fraction": self.options.val_fraction,
            }
        )
        with self._stage(2, "data") as info:
            target = self._path("data")
            if state.done("data", key, self.out) and self._shards_verify(target):
                info.update(reused=True, note="shards verified by sha256")
                return state.output("data", "sha256")
            started = time.perf_counter()
            argv = ["data", "encode", "--tokenizer", str(self._path("tokenizer"))]
            argv += ["--out", str(target), "--force"]
            argv += ["--val-fraction", repr(self.options.val_fraction)]
            self._cli("data", argv + self._input_args())
            sha = file_sha256(target / "manifest.json")
            state.record(
                "data",
                key,
                outputs={"data/manifest.json": sha},
                seconds=time.perf_counter() - started,
                results={"sha256": sha},
            )
            return sha

    @staticmethod
    def _shards_verify(data_dir: Path) -> bool:
        from trainer.data.manifest import ShardError, load_manifest  # noqa: PLC0415

        try:
            load_manifest(data_dir, verify=True)
        except (ShardError, OSError, ValueError):
            return False
        return True

    def _write_run_yaml(self, cfg) -> str:
        """The user's config with this run directory's paths: what `trainer apply` runs."""
        from ruamel.yaml import YAML  # noqa: PLC0415

        yaml = YAML()  # round-trip: the user's comments and key order survive
        tree = yaml.load(Path(self.options.config).read_text(encoding="utf-8"))
        tree["data"]["shards"] = str(self._path("data"))
        tree["data"]["tokenizer"] = str(self._path("tokenizer"))
        tree["training"]["output_dir"] = str(self._path("train"))
        buffer = io.StringIO()
        buffer.write(
            f"# Written by `trainer pipeline` from {self.options.config}: the same run, with "
            "this run directory's paths.\n"
        )
        yaml.dump(tree, buffer)
        target = self._path("run.yaml")
        text = buffer.getvalue()
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            from trainer.train.metrics_file import atomic_write_bytes  # noqa: PLC0415

            atomic_write_bytes(target, text.encode("utf-8"))
        return file_sha256(target)

    def _train(self, state, run_cfg, run_yaml_sha: str, data_sha: str) -> tuple[Path, str]:
        from trainer.checkpoint.layout import CHECKPOINTS_DIR  # noqa: PLC0415
        from trainer.checkpoint.load import latest_valid  # noqa: PLC0415
        from trainer.checkpoint.manifest import MANIFEST_FILE  # noqa: PLC0415

        steps = self.options.max_steps or run_cfg.training.max_steps
        key = stage_key(
            {
                "run.yaml": run_yaml_sha,
                "data": data_sha,
                "max_steps": steps,
                "device": self.options.device,
            }
        )
        train_dir = self._path("train")
        with self._stage(3, "train") as info:
            if state.done("train", key, self.out):
                checkpoint = self.out / state.output("train", "checkpoint")
                info.update(reused=True, note=f"{self._rel(checkpoint)} verified")
                return checkpoint, state.output("train", "manifest_sha256")
            started = time.perf_counter()
            argv = ["apply", str(self._path("run.yaml")), "--out", str(train_dir)]
            argv += ["--device", self.options.device]
            if self.options.max_steps is not None:
                argv += ["--max-steps", str(self.options.max_steps)]
            newest = None
            if train_dir.is_dir():
                newest, _ = latest_valid(train_dir / CHECKPOINTS_DIR)
            if state.started("train", key) and newest is not None:
                self.say(f"      resuming the interrupted run from {self._rel(newest)}")
                argv += ["--resume", "latest"]
            else:
                _remove(train_dir)
            state.mark_started("train", key)
            self._cli("train", argv)
            newest, skipped = latest_valid(train_dir / CHECKPOINTS_DIR)
            if newest is None:
                raise PipelineError(
                    f"stage train: {train_dir / CHECKPOINTS_DIR} holds no valid checkpoint after "
                    f"the run ({'; '.join(why for _, why in skipped) or 'none written'})"
                )
            manifest_sha = file_sha256(newest / MANIFEST_FILE)
            state.record(
                "train",
                key,
                outputs={self._rel(newest / MANIFEST_FILE): manifest_sha},
                seconds=time.perf_counter() - started,
                results={"checkpoint": self._rel(newest), "manifest_sha256": manifest_sha},
            )
            return newest, manifest_sha

    def _export(self, state: PipelineState, checkpoint: Path, ckpt_sha: str) -> None:
        key = stage_key({"checkpoint": ckpt_sha, "tokenizer": state.output("tokenizer", "sha256")})
        with self._stage(4, "export") as info:
            if state.done("export", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            target = self._path("export")
            _remove(target)
            argv = ["export", str(checkpoint), "--out", str(target)]
            self._cli("export", [*argv, "--tokenizer", str(self._path("tokenizer"))])
            model = target / "model.safetensors"
            sha = file_sha256(model)
            state.record(
                "export",
                key,
                outputs={"export/model.safetensors": sha},
                seconds=time.perf_counter() - started,
                results={"dir": "export", "model_sha256": sha, "bytes": _tree_bytes(target)},
            )

    def _baseline(self, state, run_cfg, checkpoint: Path, ckpt_sha: str) -> None:
        from trainer.pipeline.baseline import measure_baseline  # noqa: PLC0415

        steps = _steps_done(checkpoint)
        key = stage_key(
            {
                "checkpoint": ckpt_sha,
                "data": state.output("data", "sha256"),
                "steps": steps,
                "eval_tokens": run_cfg.training.eval_tokens,
            }
        )
        with self._stage(5, "baseline") as info:
            target = self._path("baseline.json")
            if state.done("baseline", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            result = measure_baseline(run_cfg, checkpoint, steps=steps)
            result["model"]["checkpoint"] = self._rel(checkpoint)
            from trainer.train.metrics_file import atomic_write_json  # noqa: PLC0415

            atomic_write_json(target, result)
            info["note"] = (
                f"model ppl {result['model']['perplexity']:.1f} vs KN trigram "
                f"{result['kn_trigram']['perplexity']:.1f} on "
                f"{result['validation']['targets']:,} val targets"
            )
            state.record(
                "baseline",
                key,
                outputs={"baseline.json": file_sha256(target)},
                seconds=time.perf_counter() - started,
            )

    def _plots(self, state: PipelineState) -> None:
        metrics = self._path("train", "metrics.jsonl")
        key = stage_key({"metrics": file_sha256(metrics)})
        with self._stage(6, "plots") as info:
            if state.done("plots", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            target = self._path("plots")
            _remove(target)
            self._cli("plots", ["plot", str(self._path("train")), "--out", str(target)])
            made = sorted(p.name for p in target.iterdir())
            state.record(
                "plots",
                key,
                outputs={f"plots/{n}": file_sha256(target / n) for n in made},
                seconds=time.perf_counter() - started,
                results={"files": [f"plots/{n}" for n in made]},
            )
            info["note"] = ", ".join(made)

    def _gates(self, state: PipelineState, ckpt_sha: str) -> None:
        with self._stage(7, "gates") as info:
            contracts = sorted(self.options.contracts.glob("*.yaml"))
            if not self.options.gates or not contracts:
                why = "--no-gates" if not self.options.gates else f"no {self.options.contracts}/"
                info["note"] = f"skipped ({why}): the gate table shows the contracts' status only"
                state.forget("gates")
                return
            key = stage_key(
                {
                    "checkpoint": ckpt_sha,
                    "contracts": {p.name: file_sha256(p) for p in contracts},
                    "code": _git_tree(),
                }
            )
            if state.done("gates", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            target = self._path("evidence")
            target.mkdir(exist_ok=True)
            checks, outputs = {}, {}
            for gate, on_run in DEMO_GATES:
                out = target / f"{gate}.json"
                argv = [sys.executable, "-m", "gates.cli.gates", "check", gate, "--out", str(out)]
                if on_run:
                    argv += ["--artifact", str(self.out)]
                argv += ["--files", *map(str, contracts)]
                self.say(f"      gates check {gate}{' on this run' if on_run else ''}")
                done = subprocess.run(argv, capture_output=True, text=True, check=False)
                if not out.is_file():
                    raise PipelineError(
                        f"stage gates: `gates check {gate}` exited {done.returncode} and wrote "
                        f"no evidence:\n{done.stdout}{done.stderr}"
                    )
                evidence = json.loads(out.read_text(encoding="utf-8"))
                checks[gate] = {
                    "verdict": evidence["verdict"],
                    "on_this_run": on_run,
                    "evidence": self._rel(out),
                }
                outputs[self._rel(out)] = file_sha256(out)
            state.record(
                "gates",
                key,
                outputs=outputs,
                seconds=time.perf_counter() - started,
                results={"checks": checks},
            )
            info["note"] = ", ".join(f"{g} {c['verdict']}" for g, c in checks.items())

    def _report(self, state: PipelineState) -> None:
        """`gates report` with this run's plot: made every time (a second or so, and its
        inputs - every evidence file and the audit - are not worth a key of their own)."""
        with self._stage(8, "report") as info:
            contracts = sorted(self.options.contracts.glob("*.yaml"))
            if not contracts:
                info["note"] = f"skipped (no {self.options.contracts}/)"
                return
            target = self._path("report.html")
            plots = [self.out / p for p in state.output("plots", "files") if p.endswith(".svg")]
            argv = [sys.executable, "-m", "gates.cli.gates", "report", "--out", str(target)]
            argv += ["--plot", *map(str, plots), "--files", *map(str, contracts)]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise PipelineError(
                    f"stage report: `gates report` exited {done.returncode}:\n"
                    f"{done.stdout}{done.stderr}"
                )
            info["note"] = str(target)


# ------------------------------------------------------------------ helpers
def _load_config(path: Path):
    from trainer.config.commands import validate  # noqa: PLC0415

    findings, cfg, _ = validate(path)
    errors = [f for f in findings if f.severity == "error"]
    if errors or cfg is None:
        for finding in findings:
            print(finding.render(), file=sys.stderr)
        raise PipelineError(f"{path}: invalid config ({len(errors)} error(s)); nothing run")
    return cfg


def _steps_done(checkpoint: Path) -> int:
    from trainer.checkpoint.load import read_state  # noqa: PLC0415

    return read_state(checkpoint).step


def _remove(path: Path) -> None:
    """A stage's own output, about to be made again (never anything outside the run dir)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _git_tree() -> str:
    """The code the gates measure: HEAD plus a hash of uncommitted changes ("" off git)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        diff = subprocess.run(["git", "diff", "HEAD"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
    import hashlib  # noqa: PLC0415

    return f"{head}+{hashlib.sha256(diff).hexdigest()[:16]}"


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
