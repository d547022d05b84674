"""The main job, stage by stage: corpus -> tokenizer -> shards -> training -> export ->
baseline -> plots -> gates -> summary.

    options = PipelineOptions(config=Path("configs/quickstart-cpu.yaml"), out=Path("runs/demo"))
    summary = Pipeline(options, say=print).run()     # stage lines to say; progress: none

Every stage calls, in this process, the library functions behind the project's own
commands - trainer tokenizer train (train_tokenizer), trainer data encode (corpus_files,
encode_corpus), trainer apply (apply_config), trainer export (export_checkpoint), trainer
plot (write_plots), gates check (gates.service.check_gate) and gates report
(gates.report.inputs.gather, gates.report.page.render) - so what the pipeline does is exactly
what a user can do by hand. A stage that fails ends the pipeline with PipelineError: the
cause, and the status `trainer pipeline` exits with (trainer/exit_codes.py: a training
run that aborted, that a stop alert ended, or whose final checkpoint could not be written
passes its own on; no stage after it runs). Stages are keyed by
content (trainer/pipeline/state.py): a stage whose inputs hash as before and whose
outputs - every file it made - still hold the bytes it left is reused; a training stage
that was interrupted (a signal, a kill) is resumed from its newest valid checkpoint
(``trainer apply --resume``), and is never recorded done: a run a signal stopped ends the
pipeline with the signal's status (128 + its number) before anything is exported.

Nothing the pipeline did not make is ever deleted (issue 31):

- The run directory is its own: one whose pipeline.json says so, or an empty or new one.
  An --out holding anything else is refused, unless ``force``, which moves those files
  into ``before-pipeline-N/`` inside it.
- One pipeline writes it at a time: the writer lock (trainer/runfiles/lock.py) is held for
  the whole run, and covers ``train/`` too (a `trainer apply` there is refused meanwhile).
- A stage about to be redone (its inputs changed, or its outputs are not what it left)
  deletes its old output only when that is exactly the files it recorded, byte for byte;
  anything else - a checkpoint directory above all - is renamed ``NAME.superseded-N``
  beside it, said on the stage's line, and kept until the user removes it.
- Keys hold no location: the training stage is keyed by the run config's identity (its
  content without paths, trainer/train/checkpointing.py identity_hash), so a run
  directory copied or moved elsewhere reuses every stage and resumes its training.

The run directory is what C-TRAINING-LOOP's checkpoint gates call a loop run directory
(run.yaml, tokenizer/, data/, train/), so `gates check GATE-TRAIN-LOOP-015 --artifact
RUN_DIR` measures this very run.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import subprocess
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from gates.io.files import atomic_write_bytes, atomic_write_text, fsync_dir, sha256_file
from gates.model.contract import Contract
from trainer import exit_codes
from trainer.pipeline.state import (
    PipelineError,
    PipelineState,
    files_fingerprint,
    stage_key,
)
from trainer.runfiles.json_file import atomic_write_json
from trainer.runfiles.lock import RunDirLockedError, writer_lock
from trainer.runfiles.names import PIPELINE_STATE_FILE, WRITER_LOCK_FILE, PipelineDir

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
    force: bool = False  # an --out holding other files: move them aside (never delete)


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
    def _stage(self, name: str) -> Iterator[dict]:
        """Header, timing and outcome line of one stage of STAGES (numbered by its place
        there); the body fills ``info``."""
        self.say(f"[{STAGES.index(name) + 1}/{len(STAGES)}] {name}")
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
        # Read-only checks first: a refusal writes nothing, not even the lock file.
        self._claim(moving=False)
        PipelineState.load(self.out)
        cfg = _load_config(self.options.config, self.options.device, self.progress)
        try:
            with writer_lock(self.out, "trainer pipeline"):
                self._claim(moving=True)  # again, holding the lock: nobody else writes now
                state = PipelineState.load(self.out)
                state.claim()  # pipeline.json first: a kill in stage 1 leaves the dir ours
                summary = self._stages(state, cfg, build_summary)
        except RunDirLockedError as exc:
            raise PipelineError(f"{exc}; nothing written") from None
        summary["seconds"] = round(time.perf_counter() - started, 1)
        atomic_write_json(self.paths.summary, summary)
        return summary

    def _stages(self, state: PipelineState, cfg, build_summary: Callable[..., dict]) -> dict:
        corpus = self._corpus_fingerprint()
        tokenizer_sha = self._tokenizer(state, cfg, corpus)
        data_sha = self._data(state, corpus, tokenizer_sha)
        self._write_run_yaml()
        run_cfg = _load_config(self.paths.run_config, self.options.device, self.progress)
        checkpoint, ckpt_sha = self._train(state, run_cfg, data_sha)
        self._export(state, checkpoint, ckpt_sha)
        self._baseline(state, run_cfg, checkpoint, ckpt_sha)
        self._plots(state)
        self._gates(state, ckpt_sha)
        self._report(state)
        return build_summary(self.out, state, corpus, run_cfg, self.outcomes)

    # ------------------------------------------------------------ ownership
    def _claim(self, *, moving: bool) -> None:
        """The run directory is the pipeline's: new, empty, or holding its pipeline.json.
        Anything else is refused (PipelineError); with ``force`` - once ``moving``, under
        the lock - those files are moved into before-pipeline-N/ inside it."""
        if os.path.lexists(self.paths.state) or not os.path.lexists(self.out):
            return
        if not self.out.is_dir() or self.out.is_symlink():
            raise PipelineError(f"--out {self.out}: not a directory; nothing written")
        foreign = sorted(p.name for p in self.out.iterdir() if p.name != WRITER_LOCK_FILE)
        if not foreign:
            return
        if not self.options.force:
            more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
            shown = ", ".join(foreign[:5]) + more
            raise PipelineError(
                f"--out {self.out} holds files the pipeline did not write ({shown}) and no "
                f"{PIPELINE_STATE_FILE}: choose another --out, or pass --force to move them "
                "into a before-pipeline-N/ directory inside it (nothing is deleted)"
            )
        if not moving:
            return
        aside = _free_name(self.out / "before-pipeline")
        aside.mkdir()
        for name in foreign:
            os.rename(self.out / name, aside / name)
        fsync_dir(aside)
        fsync_dir(self.out)
        self.say(f"      --force: moved {len(foreign)} file(s) of {self.out} into {aside}")

    def _make_room(self, state: PipelineState, stage: str, target: Path, why: str) -> None:
        """Clear ``target`` for ``stage`` to make again: deleted when it is exactly the
        files the stage recorded, byte for byte (nothing of anyone else's); otherwise
        renamed NAME.superseded-N beside it and kept, which the stage's line says."""
        if not os.path.lexists(target):
            return
        if state.made_exactly(stage, target, self.out):
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            else:
                target.unlink()
            return
        aside = _free_name(target.with_name(f"{target.name}.superseded"))
        os.rename(target, aside)
        fsync_dir(target.parent)
        self.say(
            f"      moved {self._rel(target)} aside to {self._rel(aside)} ({why}); nothing "
            "was deleted: remove it when you no longer need it"
        )

    def _tree(self, *paths: Path) -> dict[str, str]:
        """relative path -> sha256 of every regular file at or under ``paths``: what a stage
        made, every file of it (its reuse check and what _make_room may delete)."""
        found: dict[str, str] = {}
        for path in paths:
            files = [path] if path.is_file() else sorted(path.rglob("*"))
            for f in files:
                if f.is_file() and not f.is_symlink() and f.name != WRITER_LOCK_FILE:
                    found[self._rel(f)] = sha256_file(f)
        return found

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
        with self._stage("tokenizer") as info:
            if state.done("tokenizer", key, self.out):
                info.update(reused=True, note=f"vocab {vocab}, same corpus")
                return state.output("tokenizer", "sha256")
            started = time.perf_counter()
            target = self.paths.tokenizer
            self._make_room(state, "tokenizer", target, "another corpus or vocabulary")
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
                outputs=self._tree(target),
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
        with self._stage("data") as info:
            target = self.paths.data
            if state.done("data", key, self.out) and self._shards_verify(target):
                info.update(reused=True, note="shards verified by sha256")
                return state.output("data", "sha256")
            started = time.perf_counter()
            self._make_room(state, "data", target, "another corpus or tokenizer")
            try:
                files, skipped = corpus_files(list(self.options.inputs), False, self.progress)
                encode_corpus(
                    files,
                    self.paths.tokenizer,
                    target,
                    val_fraction=self.options.val_fraction,
                    skipped_files=skipped,
                    progress=self.progress,
                )
            except ENCODE_ERRORS as exc:
                raise _failed("data", exc) from exc
            sha = sha256_file(target / "manifest.json")
            state.record(
                "data",
                key,
                outputs=self._tree(target),
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

    def _write_run_yaml(self) -> None:
        """The user's config with this run directory's paths: what `trainer apply` runs.
        Rewritten when the run directory moved; no stage key reads its bytes (the paths
        are where the run is, not what it computes)."""
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
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            atomic_write_text(target, text)

    def _train(self, state: PipelineState, run_cfg, data_sha: str) -> tuple[Path, str]:
        from trainer.checkpoint.layout import MANIFEST_FILE, step_of  # noqa: PLC0415
        from trainer.checkpoint.load import latest_valid  # noqa: PLC0415
        from trainer.train.apply import (  # noqa: PLC0415
            ApplyError,
            ApplyOptions,
            RunAbortedError,
            alert_line,
            apply_config,
            summary_line,
        )
        from trainer.train.checkpointing import identity_hash  # noqa: PLC0415

        steps = self.options.max_steps or run_cfg.training.max_steps
        # The run, not where it is: a moved run directory keeps the key and resumes. The
        # steps asked for are not in it: a longer --max-steps continues the same run.
        key = stage_key(
            {
                "run": identity_hash(run_cfg.to_json()),
                "data": data_sha,
                "device": self.options.device,
            }
        )
        train = self.paths.train
        with self._stage("train") as info:
            if state.done("train", key, self.out) and state.result("train", "steps") == steps:
                checkpoint = self.out / state.output("train", "checkpoint")
                info.update(reused=True, note=f"{self._rel(checkpoint)} verified by sha256")
                return checkpoint, state.output("train", "manifest_sha256")
            started = time.perf_counter()
            newest = latest_valid(train.checkpoints)[0] if train.root.is_dir() else None
            resume = None
            if state.same_key("train", key) and newest is not None and step_of(newest) <= steps:
                if state.stages["train"].get("status") == "done":  # a longer --max-steps
                    self.say(f"      continuing the run from {self._rel(newest)} to step {steps}")
                else:
                    self.say(f"      resuming the interrupted run from {self._rel(newest)}")
                resume = "latest"
            else:
                why = (
                    f"it trained past step {steps}"
                    if state.same_key("train", key) and newest is not None
                    else "another run config, data or device"
                )
                self._make_room(state, "train", train.root, why)
            state.mark_started("train", key)
            options = ApplyOptions(
                max_steps=self.options.max_steps,
                out=train.root,
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
            if result.stop_reason == "signal":  # not finished: resumed by the next run
                raise _interrupted(result.steps_run, result.signal)
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
            newest, skipped = latest_valid(train.checkpoints)
            if newest is None:
                raise PipelineError(
                    f"stage train: {train.checkpoints} holds no valid checkpoint after "
                    f"the run ({'; '.join(why for _, why in skipped) or 'none written'})"
                )
            manifest_sha = sha256_file(newest / MANIFEST_FILE)
            state.record(
                "train",
                key,
                # The checkpoint the later stages read, every file of it, and the run's
                # record of its steps (the plots are drawn from it).
                outputs=self._tree(newest, train.metrics, train.training_state, train.manifest),
                seconds=time.perf_counter() - started,
                results={
                    "checkpoint": self._rel(newest),
                    "manifest_sha256": manifest_sha,
                    "steps": steps,
                },
            )
            return newest, manifest_sha

    def _export(self, state: PipelineState, checkpoint: Path, ckpt_sha: str) -> None:
        from trainer.checkpoint.export import EXPORT_ERRORS, export_checkpoint  # noqa: PLC0415

        key = stage_key({"checkpoint": ckpt_sha, "tokenizer": state.output("tokenizer", "sha256")})
        with self._stage("export") as info:
            if state.done("export", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            target = self.paths.export
            self._make_room(state, "export", target, "another checkpoint or tokenizer")
            try:
                export_checkpoint(checkpoint, target, tokenizer_dir=self.paths.tokenizer)
            except EXPORT_ERRORS as exc:
                raise _failed("export", exc) from exc
            model = target / "model.safetensors"
            sha = sha256_file(model)
            state.record(
                "export",
                key,
                outputs=self._tree(target),
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
        with self._stage("baseline") as info:
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
        with self._stage("plots") as info:
            if state.done("plots", key, self.out):
                info.update(reused=True)
                return
            started = time.perf_counter()
            target = self.paths.plots
            self._make_room(state, "plots", target, "the run's metrics changed")
            try:
                write_plots([self.paths.train.root], target)
            except PlotError as exc:
                raise _failed("plots", exc) from exc
            made = sorted(p.name for p in target.iterdir())
            state.record(
                "plots",
                key,
                outputs=self._tree(target),
                seconds=time.perf_counter() - started,
                results={"files": [self._rel(target / n) for n in made]},
            )
            info["note"] = ", ".join(made)

    def _gates(self, state: PipelineState, ckpt_sha: str) -> None:
        with self._stage("gates") as info:
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
        with self._stage("report") as info:
            contracts = sorted(self.options.contracts.glob("*.yaml"))
            if not contracts:
                info["note"] = f"skipped (no {self.options.contracts}/)"
                return
            from gates.report.inputs import ReportError, gather  # noqa: PLC0415
            from gates.report.page import render  # noqa: PLC0415

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
    report --files` validate them (gates.service); an unreadable or invalid one fails the
    stage (the validation errors to ``show``)."""
    from gates import service  # noqa: PLC0415
    from gates.pv.render import render  # noqa: PLC0415

    try:
        return service.usable_contracts(paths).contracts
    except service.ContractsUnusableError as exc:
        if exc.unreadable:
            raise _failed(stage, str(exc)) from None
        show(render(exc.report, "text"))
        raise _failed(stage, "the contracts do not validate; the errors are above") from None


def _check_gate(
    contracts: list[Contract],
    gate_id: str,
    artifacts: list[Path],
    out: Path,
    files: list[Path],
    *,
    show: Callable[[str], None],
) -> dict:
    """`gates check GATE [--artifact PATH] --out OUT --files FILE...` (gates.service): the
    gate's bound tests and measurement, its evidence written to ``out`` whatever the verdict.
    What the check prints is held back, as from the command in a subprocess, and shown (to
    ``show``) only when the check cannot be made; that fails the stage."""
    from gates import service  # noqa: PLC0415

    try:
        contract, gate = service.find_gate(contracts, gate_id)
    except service.UnknownGateError:
        raise _failed(
            "gates", f"no contract in {', '.join(map(str, files))} has {gate_id}"
        ) from None
    command = ["gates", "check", gate_id, "--out", str(out)]
    command += [arg for path in artifacts for arg in ("--artifact", str(path))]
    command += ["--files", *map(str, files)]
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            result = service.check_gate(contract, gate, artifacts, command=command, out=out)
    except Exception as exc:  # refused, or a measurement's own failure (gates: INTERNAL)
        if printed.getvalue():
            show(printed.getvalue().removesuffix("\n"))
        why = "".join(traceback.format_exception_only(exc)).strip()
        raise _failed("gates", f"`{' '.join(command)}` wrote no evidence: {why}") from exc
    return result.evidence


def _steps_done(checkpoint: Path) -> int:
    from trainer.checkpoint.load import read_state  # noqa: PLC0415

    return read_state(checkpoint).step


def _interrupted(step: int, signum: int | None) -> PipelineError:
    """A training run a signal stopped: not done, its checkpoint kept, resumed next time;
    the status is the signal's conventional one (128 + its number) so that a script or a
    scheduler sees the job did not finish."""
    name = signal.Signals(signum).name if signum else "a signal"
    status = exit_codes.SIGNALLED_BASE + (signum or signal.SIGTERM)
    return PipelineError(
        f"stage train: interrupted by {name} after step {step}; its checkpoint is kept and "
        "nothing was exported or scored. Run the pipeline again to resume the training",
        status=status,
    )


def _free_name(base: Path) -> Path:
    """``base`` with the first free ``-N`` suffix (N from 1): a name nothing has yet."""
    n = 1
    while os.path.lexists(f"{base}-{n}"):
        n += 1
    return Path(f"{base}-{n}")


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
