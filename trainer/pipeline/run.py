"""The main job, stage by stage: corpus -> tokenizer -> shards -> training -> export ->
baseline -> plots -> gates -> summary.

    options = PipelineOptions(config=Path("configs/quickstart-cpu.yaml"), out=Path("runs/demo"))
    summary = Pipeline(options, say=print).run()     # stage lines to say; progress: none

Every stage calls, in this process, the library functions behind the project's own
commands - trainer tokenizer train (train_tokenizer), trainer data encode (corpus_files,
encode_corpus), trainer apply (apply_config), trainer export (export_checkpoint), trainer
plot (write_plots), gates check (gates.promotion.check) and gates report
(gates.report_inputs.gather, gates.report.render) - so what the pipeline does is exactly
what a user can do by hand. A stage that fails ends the pipeline with PipelineError: the
cause, and the status `trainer pipeline` exits with (trainer/exit_codes.py: a training
run that aborted, that a stop alert ended, or whose final checkpoint could not be written
passes its own on; no stage after it runs). Stages are keyed by
content (trainer/pipeline/state.py): a stage whose inputs hash as before and whose
outputs still hold the bytes it left is reused; a training stage that was interrupted is
resumed from its newest valid checkpoint (``trainer apply --resume``).

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
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gates.contract import Contract
from gates.files import atomic_write_bytes, atomic_write_text, sha256_file
from trainer import exit_codes
from trainer.pipeline.state import (
    PipelineError,
    PipelineState,
    files_fingerprint,
    stage_key,
)
from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.names import PipelineDir

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
#: BPE's minimum pair count, `trainer tokenizer train`'s default (part of the stage's key).
TOKENIZER_MIN_FREQUENCY = 2


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


def _quiet(line: str) -> None:
    """Output nobody asked for."""


@dataclass
class Pipeline:
    """The pipeline of ``options``; what it has to say goes where its caller wants it
    (`trainer pipeline`: ``say`` to stdout, ``progress`` to stderr), nowhere by default."""

    options: PipelineOptions
    say: Callable[[str], None] = _quiet  # a line per stage, the training run's summary
    progress: Callable[[str], None] = _quiet  # the stages' own progress lines and findings
    outcomes: list[StageOutcome] = field(default_factory=list)

    # ------------------------------------------------------------ plumbing
    @property
    def out(self) -> Path:
        return self.options.out

    @property
    def paths(self) -> PipelineDir:
        """The run directory's paths (trainer/runfiles/names.py)."""
        return PipelineDir(self.out)

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

    # ------------------------------------------------------------ the stages
    def run(self) -> dict:
        from trainer.pipeline.summary import build_summary  # noqa: PLC0415

        started = time.perf_counter()
        self.out.mkdir(parents=True, exist_ok=True)
        state = PipelineState.load(self.out)
        cfg = _load_config(self.options.config, self.options.device, self.progress)
        corpus = self._corpus_fingerprint()
        tokenizer_sha = self._tokenizer(state, cfg, corpus)
        data_sha = self._data(state, corpus, tokenizer_sha)
        run_yaml_sha = self._write_run_yaml()
        run_cfg = _load_config(self.paths.run_config, self.options.device, self.progress)
        checkpoint, ckpt_sha = self._train(state, run_cfg, run_yaml_sha, data_sha)
        self._export(state, checkpoint, ckpt_sha)
        self._baseline(state, run_cfg, checkpoint, ckpt_sha)
        self._plots(state)
        self._gates(state, ckpt_sha)
        self._report(state)
        summary = build_summary(self.out, state, corpus, run_cfg, self.outcomes)
        summary["seconds"] = round(time.perf_counter() - started, 1)
        atomic_write_json(self.paths.summary, summary)
        return summary

    def _corpus_fingerprint(self) -> dict:
        from trainer.data.encode import corpus_files  # noqa: PLC0415

        files, skipped = corpus_files(list(self.options.inputs), False, self.progress)
        sha, count, size = files_fingerprint(files)
        return {"sha256": sha, "files": count, "bytes": size, "skipped": skipped}

    def _tokenizer(self, state: PipelineState, cfg, corpus: dict) -> str:
        from trainer.tokenizer.bpe import BpeConfigError  # noqa: PLC0415
        from trainer.tokenizer.counting import CorpusReadError  # noqa: PLC0415
        from trainer.tokenizer.training import train_tokenizer  # noqa: PLC0415

        vocab = cfg.model.vocab_size
        min_frequency = TOKENIZER_MIN_FREQUENCY
        key = stage_key(
            {"corpus": corpus["sha256"], "vocab_size": vocab, "min_frequency": min_frequency}
        )
        with self._stage(1, "tokenizer") as info:
            if state.done("tokenizer", key, self.out):
                info.update(reused=True, note=f"vocab {vocab}, same corpus")
                return state.output("tokenizer", "sha256")
            started = time.perf_counter()
            target = self.paths.tokenizer
            _remove(target)
            try:
                train_tokenizer(
                    list(self.options.inputs),
                    target,
                    vocab_size=vocab,
                    min_frequency=min_frequency,
                    progress=self.progress,
                )
            except (CorpusReadError, BpeConfigError) as exc:
                raise _failed("tokenizer", exc) from exc
            sha = sha256_file(target / "tokenizer.json")
            state.record(
                "tokenizer",
                key,
                outputs={self._rel(target / "tokenizer.json"): sha},
                seconds=time.perf_counter() - started,
                results={"sha256": sha, "vocab_size": vocab},
            )
            info["note"] = f"vocab {vocab}"
            return sha

    def _data(self, state: PipelineState, corpus: dict, tokenizer_sha: str) -> str:
        from trainer.data.encode import ENCODE_ERRORS, corpus_files, encode_corpus  # noqa: PLC0415

        key = stage_key(
            {
                "corpus": corpus["sha256"],
                "tokenizer": tokenizer_sha,
                "val_fraction": self.options.val_fraction,
            }
        )
        with self._stage(2, "data") as info:
            target = self.paths.data
            if state.done("data", key, self.out) and self._shards_verify(target):
                info.update(reused=True, note="shards verified by sha256")
                return state.output("data", "sha256")
            started = time.perf_counter()
            try:
                files, skipped = corpus_files(list(self.options.inputs), False, self.progress)
                encode_corpus(
                    files,
                    self.paths.tokenizer,
                    target,
                    val_fraction=self.options.val_fraction,
                    force=True,
                    skipped_files=skipped,
                    progress=self.progress,
                )
            except ENCODE_ERRORS as exc:
                raise _failed("data", exc) from exc
            sha = sha256_file(target / "manifest.json")
            state.record(
                "data",
                key,
                outputs={self._rel(target / "manifest.json"): sha},
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

    def _write_run_yaml(self) -> str:
        """The user's config with this run directory's paths: what `trainer apply` runs."""
        from ruamel.yaml import YAML  # noqa: PLC0415

        yaml = YAML()  # round-trip: the user's comments and key order survive
        tree = yaml.load(Path(self.options.config).read_text(encoding="utf-8"))
        tree["data"]["shards"] = str(self.paths.data)
        tree["data"]["tokenizer"] = str(self.paths.tokenizer)
        tree["training"]["output_dir"] = str(self.paths.train.root)
        buffer = io.StringIO()
        buffer.write(
            f"# Written by `trainer pipeline` from {self.options.config}: the same run, with "
            "this run directory's paths.\n"
        )
        yaml.dump(tree, buffer)
        target = self.paths.run_config
        text = buffer.getvalue()
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            atomic_write_text(target, text)
        return sha256_file(target)

    def _train(self, state, run_cfg, run_yaml_sha: str, data_sha: str) -> tuple[Path, str]:
        from trainer.checkpoint.load import latest_valid  # noqa: PLC0415
        from trainer.checkpoint.manifest import MANIFEST_FILE  # noqa: PLC0415
        from trainer.train.apply import (  # noqa: PLC0415
            ApplyError,
            ApplyOptions,
            RunAbortedError,
            alert_line,
            apply_config,
            summary_line,
        )

        steps = self.options.max_steps or run_cfg.training.max_steps
        key = stage_key(
            {
                "run.yaml": run_yaml_sha,
                "data": data_sha,
                "max_steps": steps,
                "device": self.options.device,
            }
        )
        train_dir = self.paths.train.root
        with self._stage(3, "train") as info:
            if state.done("train", key, self.out):
                checkpoint = self.out / state.output("train", "checkpoint")
                info.update(reused=True, note=f"{self._rel(checkpoint)} verified")
                return checkpoint, state.output("train", "manifest_sha256")
            started = time.perf_counter()
            newest, resume = None, None
            if train_dir.is_dir():
                newest, _ = latest_valid(self.paths.train.checkpoints)
            if state.started("train", key) and newest is not None:
                self.say(f"      resuming the interrupted run from {self._rel(newest)}")
                resume = "latest"
            else:
                _remove(train_dir)
            state.mark_started("train", key)
            options = ApplyOptions(
                max_steps=self.options.max_steps,
                out=train_dir,
                device=self.options.device,
                resume=resume,
            )
            try:
                result, out_dir = apply_config(self.paths.run_config, options, say=self.progress)
            except ApplyError as exc:
                raise _failed("train", exc) from exc
            except RunAbortedError as exc:
                raise _failed("train", f"run aborted: {exc}", exit_codes.ABORTED) from exc
            self.say(summary_line(result, self.paths.run_config, out_dir))
            if result.save_failed is not None:  # its steps are not all saved: no export
                raise _failed(
                    "train",
                    f"the final checkpoint of step {result.steps_run} was not written "
                    f"({result.save_failed}); nothing is exported or scored",
                    exit_codes.SAVE_FAILED,
                )
            if result.stop_reason == "alert":  # it did not finish: no stage after it runs
                stopped = alert_line(result) or "stopped by an alert"
                raise _failed("train", stopped, exit_codes.ALERT_STOPPED)
            newest, skipped = latest_valid(self.paths.train.checkpoints)
            if newest is None:
                raise PipelineError(
                    f"stage train: {self.paths.train.checkpoints} holds no valid checkpoint after "
                    f"the run ({'; '.join(why for _, why in skipped) or 'none written'})"
                )
            manifest_sha = sha256_file(newest / MANIFEST_FILE)
            state.record(
                "train",
                key,
                outputs={self._rel(newest / MANIFEST_FILE): manifest_sha},
                seconds=time.perf_counter() - started,
                results={"checkpoint": self._rel(newest), "manifest_sha256": manifest_sha},
            )
            return newest, manifest_sha

    def _export(self, state: PipelineState, checkpoint: Path, ckpt_sha: str) -> None:
        from trainer.checkpoint.export import EXPORT_ERRORS, export_checkpoint  # noqa: PLC0415

        key = stage_key({"checkpoint": ckpt_sha, "tokenizer": state.output("tokenizer", "sha256")})
        with self._stage(4, "export") as info:
            if state.done("export", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            target = self.paths.export
            _remove(target)
            try:
                export_checkpoint(checkpoint, target, tokenizer_dir=self.paths.tokenizer)
            except EXPORT_ERRORS as exc:
                raise _failed("export", exc) from exc
            model = target / "model.safetensors"
            sha = sha256_file(model)
            state.record(
                "export",
                key,
                outputs={self._rel(model): sha},
                seconds=time.perf_counter() - started,
                results={
                    "dir": self._rel(target),
                    "model_sha256": sha,
                    "bytes": _tree_bytes(target),
                },
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
            target = self.paths.baseline
            if state.done("baseline", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            result = measure_baseline(run_cfg, checkpoint, steps=steps)
            result["model"]["checkpoint"] = self._rel(checkpoint)
            atomic_write_json(target, result)
            info["note"] = (
                f"model ppl {result['model']['perplexity']:.1f} vs KN trigram "
                f"{result['kn_trigram']['perplexity']:.1f} on "
                f"{result['validation']['targets']:,} val targets"
            )
            state.record(
                "baseline",
                key,
                outputs={self._rel(target): sha256_file(target)},
                seconds=time.perf_counter() - started,
            )

    def _plots(self, state: PipelineState) -> None:
        from trainer.plot.write import PlotError, write_plots  # noqa: PLC0415

        key = stage_key({"metrics": sha256_file(self.paths.train.metrics)})
        with self._stage(6, "plots") as info:
            if state.done("plots", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            target = self.paths.plots
            _remove(target)
            try:
                write_plots([self.paths.train.root], target)
            except PlotError as exc:
                raise _failed("plots", exc) from exc
            made = sorted(p.name for p in target.iterdir())
            state.record(
                "plots",
                key,
                outputs={self._rel(target / n): sha256_file(target / n) for n in made},
                seconds=time.perf_counter() - started,
                results={"files": [self._rel(target / n) for n in made]},
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
                    "contracts": {p.name: sha256_file(p) for p in contracts},
                    "code": _git_tree(),
                }
            )
            if state.done("gates", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            valid = _valid_contracts(contracts, "gates", self.progress)
            target = self.paths.evidence
            target.mkdir(exist_ok=True)
            checks, outputs = {}, {}
            for gate, on_run in DEMO_GATES:
                out = target / f"{gate}.json"
                self.say(f"      gates check {gate}{' on this run' if on_run else ''}")
                artifacts = [self.out] if on_run else []
                evidence = _check_gate(valid, gate, artifacts, out, contracts, show=self.progress)
                checks[gate] = {
                    "verdict": evidence["verdict"],
                    "on_this_run": on_run,
                    "evidence": self._rel(out),
                }
                outputs[self._rel(out)] = sha256_file(out)
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
            from gates.report import render  # noqa: PLC0415
            from gates.report_inputs import ReportError, gather  # noqa: PLC0415

            target = self.paths.report
            plots = [self.out / p for p in state.output("plots", "files") if p.endswith(".svg")]
            valid = _valid_contracts(contracts, "report", self.progress)
            try:
                inputs = gather(valid, target, plots=plots)
            except ReportError as exc:
                raise _failed("report", f"`gates report`: {exc}; nothing written") from exc
            atomic_write_bytes(target, render(inputs).encode("utf-8"))
            info["note"] = str(target)


# ------------------------------------------------------------------ helpers
def _failed(stage: str, why: object, status: int = exit_codes.FINDINGS) -> PipelineError:
    """The error that ends the pipeline at ``stage``, and what to do about it."""
    return PipelineError(
        f"stage {stage}: {why}. Fix the cause and run the pipeline again: finished stages "
        "are reused",
        status=status,
    )


def _load_config(path: Path, device: str, show: Callable[[str], None]):
    """The checked config, refused (before any stage) for what ``device`` cannot run; the
    findings of a refused one go to ``show``, a line each."""
    from trainer.config.device import run_device  # noqa: PLC0415
    from trainer.config.validate import validate  # noqa: PLC0415

    findings, cfg, _ = validate(path, device=run_device(device))
    errors = [f for f in findings if f.severity == "error"]
    if errors or cfg is None:
        for finding in findings:
            show(finding.render())
        raise PipelineError(f"{path}: invalid config ({len(errors)} error(s)); nothing run")
    return cfg


def _valid_contracts(paths: list[Path], stage: str, show: Callable[[str], None]) -> list[Contract]:
    """The contracts at ``paths``, validated together as `gates check --files` and `gates
    report --files` validate them; an unreadable or invalid one fails the stage (the
    validation errors to ``show``)."""
    from gates.render import render  # noqa: PLC0415
    from gates.validate import validate  # noqa: PLC0415

    result = validate(paths)
    if result.unreadable:
        raise _failed(stage, "; ".join(result.unreadable))
    if result.report.errors:
        show(render(result.report, "text"))
        raise _failed(stage, "the contracts do not validate; the errors are above")
    return result.contracts


def _check_gate(
    contracts: list[Contract],
    gate_id: str,
    artifacts: list[Path],
    out: Path,
    files: list[Path],
    *,
    show: Callable[[str], None],
) -> dict:
    """`gates check GATE [--artifact PATH] --out OUT --files FILE...`: the gate's bound tests
    and measurement (gates.promotion.check), its evidence written to ``out`` whatever the
    verdict. What the check prints is held back, as from the command in a subprocess, and
    shown (to ``show``) only when the check cannot be made; that fails the stage."""
    from gates import promotion  # noqa: PLC0415
    from gates.validate import find_root  # noqa: PLC0415

    found = [(c, g) for c in contracts for g in c.gates if g.id == gate_id]
    if not found:
        raise _failed("gates", f"no contract in {', '.join(map(str, files))} has {gate_id}")
    contract, gate = found[0]
    command = ["gates", "check", gate_id, "--out", str(out)]
    command += [arg for path in artifacts for arg in ("--artifact", str(path))]
    command += ["--files", *map(str, files)]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            result = promotion.check(
                find_root(contract.path),
                contract,
                gate,
                artifacts,
                command=command,
            )
    except Exception as exc:  # refused, or a measurement's own failure (gates: INTERNAL)
        if printed.getvalue():
            show(printed.getvalue().removesuffix("\n"))
        why = "".join(traceback.format_exception_only(exc)).strip()
        raise _failed("gates", f"`{' '.join(command)}` wrote no evidence: {why}") from exc
    atomic_write_bytes(out, (json.dumps(result.evidence, indent=2) + "\n").encode())
    return result.evidence


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
