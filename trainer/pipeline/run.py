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
- The run directory and the corpus are apart: an --out inside an --input (it would be
  read as corpus) or an --input inside --out is refused before anything is written.
- One pipeline writes it at a time: the writer lock (trainer/runfiles/lock.py) is held for
  the whole run, and covers ``train/`` too (a `trainer apply` there is refused meanwhile).
- A stage about to be redone (its inputs changed, or its outputs are not what it left)
  deletes its old output only when that is exactly the files it recorded, byte for byte;
  anything else - a checkpoint directory above all - is renamed ``NAME.superseded-N``
  beside it, said on the stage's line, and kept until the user removes it.
- Keys hold no location: the training stage is keyed by the run config's identity (its
  content without paths, trainer/train/checkpointing.py identity_hash), so a run
  directory copied or moved elsewhere reuses every stage and resumes its training.
- Keys hold the code: every stage that builds an artifact from its inputs (tokenizer,
  shards, export, baseline, plots) is keyed by the trainer's source too
  (state.code_fingerprint), so an edited or upgraded trainer makes them again. The training
  stage is not: a run resumes, and a finished one is kept, across versions of the trainer
  (a checkpoint carries its own format version, which the loader checks).
- The gates stage is keyed by the code that measures, too: the project holding the
  contracts, by HEAD, uncommitted changes and untracked files (state.project_fingerprint).
- summary.json and report.html are the last run's record: the next run clears them
  (the same rule: deleted when they are the bytes it wrote) before its first stage, and
  writes its own only when every stage is done, so a run that fails, is stopped or is
  killed never leaves one that reads as finished.
- A new run config is checked (the step algebra with the real sequence count, the data)
  before a finished training is set aside for it: a config `trainer apply` refuses
  leaves the training and its record as they were.

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
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from gates.io.files import atomic_write_bytes, atomic_write_text, fsync_dir, sha256_file
from gates.model.contract import Contract
from trainer import exit_codes
from trainer.config.sections import RunConfig
from trainer.pipeline.state import (
    PipelineError,
    PipelineState,
    code_fingerprint,
    files_fingerprint,
    project_fingerprint,
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
#: pipeline.json's record of the summary.json a finished run wrote (not a stage: no key).
SUMMARY_RECORD = "summary"
#: BPE's minimum pair count, `trainer tokenizer train`'s default (part of the stage's key).
TOKENIZER_MIN_FREQUENCY = 2


@dataclass(frozen=True)
class PipelineOptions:
    config: Path
    out: Path
    inputs: tuple[Path, ...] = ()  # corpus files/directories; () = the embedded corpus
    stop_after: int | None = None  # `--stop-after`: the last step of this run, None: the end
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


@dataclass
class Made:
    """What a stage made: every file of it (relative path -> sha256, its reuse check),
    what later stages and the summary read from it, and a note for its line."""

    outputs: dict[str, str]
    results: dict = field(default_factory=dict)
    note: str = ""


class Skipped(Exception):  # noqa: N818 - not an error: a stage with nothing to do
    """Raised by a stage's inputs: the stage does not run this time (the message says
    why); its old record is dropped."""


@dataclass
class Job:
    """What one run of the pipeline carries from stage to stage besides pipeline.json."""

    state: PipelineState
    cfg: RunConfig  # the user's config, checked
    corpus: dict  # the corpus fingerprint: sha256, files, bytes, skipped
    code: str  # the trainer's source (state.code_fingerprint): in the artifact stages' keys
    run_cfg: RunConfig | None = None  # run.yaml, checked: set by the training stage's inputs


@dataclass(frozen=True)
class Stage:
    """One row of STAGES, which Pipeline._run_stage runs as key -> reuse -> make -> record.

    ``inputs`` returns what the key hashes (or raises Skipped); the stage is reused when
    it finished with that key, every output it recorded still has its sha256, and
    ``intact`` holds too. Otherwise ``make`` makes it (clearing its old output with
    Pipeline._make_room first) and the loop records what it made. An unkeyed stage is
    made every time, never reused; what it made is recorded all the same."""

    name: str
    inputs: Callable[[Pipeline, Job], dict]
    make: Callable[[Pipeline, Job, str], Made]
    intact: Callable[[Pipeline, Job], bool] = lambda pipeline, job: True
    reused_note: Callable[[Pipeline, Job], str] = lambda pipeline, job: ""
    keyed: bool = True


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

    # ------------------------------------------------------------ the loop
    def run(self) -> dict:
        from trainer.pipeline.summary import build_summary  # noqa: PLC0415

        started = time.perf_counter()
        # Read-only checks first: a refusal writes nothing, not even the lock file.
        overlap = inputs_overlap(self.out, self.options.inputs)
        if overlap:
            raise PipelineError(f"{overlap}; nothing written")
        self._claim(moving=False)
        PipelineState.load(self.out)
        cfg = _load_config(self.options.config, self.options.device, self.progress)
        try:
            with writer_lock(self.out, "trainer pipeline"):
                self._claim(moving=True)  # again, holding the lock: nobody else writes now
                state = PipelineState.load(self.out)
                state.claim()  # pipeline.json first: a kill in stage 1 leaves the dir ours
                self._withdraw_last_summary(state)
                job = Job(state, cfg, self._corpus_fingerprint(), code_fingerprint())
                for number, stage in enumerate(STAGES, start=1):
                    self.say(f"[{number}/{len(STAGES)}] {stage.name}")
                    self._run_stage(stage, job)
                summary = build_summary(self.out, state, job.corpus, job.run_cfg, self.outcomes)
                summary["seconds"] = round(time.perf_counter() - started, 1)
                atomic_write_json(self.paths.summary, summary)
                state.record(
                    SUMMARY_RECORD,
                    "",
                    outputs={self._rel(self.paths.summary): sha256_file(self.paths.summary)},
                    seconds=0.0,
                )
        except RunDirLockedError as exc:
            raise PipelineError(f"{exc}; nothing written") from None
        return summary

    def _withdraw_last_summary(self, state: PipelineState) -> None:
        """The last run's summary.json and report.html describe that run, not this one:
        they go before this run's first stage, so a run that fails, is stopped or is killed
        leaves none that reads as finished (the run writes its own at its end). Deleted
        when they are the bytes the pipeline recorded, moved aside otherwise (_make_room)."""
        for record, target in ((SUMMARY_RECORD, self.paths.summary), ("report", self.paths.report)):
            self._make_room(state, record, target, "the last run's, edited since")
            state.forget(record)

    def _run_stage(self, stage: Stage, job: Job) -> None:
        """Key -> reuse -> make -> record, and the stage's outcome line."""
        started = time.perf_counter()
        reused = skipped = False
        try:
            inputs = stage.inputs(self, job)
        except Skipped as why:
            job.state.forget(stage.name)
            skipped, note = True, str(why)
        else:
            key = stage_key(inputs) if stage.keyed else ""
            if (
                stage.keyed
                and job.state.done(stage.name, key, self.out)
                and stage.intact(self, job)
            ):
                reused, note = True, stage.reused_note(self, job)
            else:
                made = stage.make(self, job, key)
                # An unkeyed stage is recorded too (never reused): what it wrote is known to
                # be the pipeline's, for the next run to clear.
                if stage.keyed or made.outputs:
                    job.state.record(
                        stage.name,
                        key,
                        outputs=made.outputs,
                        seconds=time.perf_counter() - started,
                        results=made.results,
                    )
                note = made.note
        seconds = time.perf_counter() - started
        self.outcomes.append(StageOutcome(stage.name, reused, seconds, note))
        if skipped:
            self.say(f"      {stage.name}: skipped ({note})")
            return
        verb = "reused" if reused else f"done in {_duration(seconds)}"
        self.say(f"      {stage.name}: {verb}{' - ' + note if note else ''}")

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

    # ------------------------------------------------------------ the stages
    def _corpus_fingerprint(self) -> dict:
        from trainer.data.encode import corpus_files  # noqa: PLC0415

        files, skipped = corpus_files(list(self.options.inputs), False, self.progress)
        sha, count, size = files_fingerprint(files)
        return {"sha256": sha, "files": count, "bytes": size, "skipped": skipped}

    def _tokenizer_inputs(self, job: Job) -> dict:
        return {
            "corpus": job.corpus["sha256"],
            "vocab_size": job.cfg.model.vocab_size,
            "min_frequency": TOKENIZER_MIN_FREQUENCY,
            "code": job.code,
        }

    def _make_tokenizer(self, job: Job, key: str) -> Made:
        from trainer.tokenizer.bpe import BpeConfigError  # noqa: PLC0415
        from trainer.tokenizer.counting import CorpusReadError  # noqa: PLC0415
        from trainer.tokenizer.training import train_tokenizer  # noqa: PLC0415

        vocab = job.cfg.model.vocab_size
        target = self.paths.tokenizer
        self._make_room(
            job.state, "tokenizer", target, "another corpus, vocabulary or trainer code"
        )
        try:
            train_tokenizer(
                list(self.options.inputs),
                target,
                vocab_size=vocab,
                min_frequency=TOKENIZER_MIN_FREQUENCY,
                progress=self.progress,
            )
        except (CorpusReadError, BpeConfigError) as exc:
            raise _failed("tokenizer", exc) from exc
        sha = sha256_file(target / "tokenizer.json")
        return Made(self._tree(target), {"sha256": sha, "vocab_size": vocab}, f"vocab {vocab}")

    def _data_inputs(self, job: Job) -> dict:
        return {
            "corpus": job.corpus["sha256"],
            "tokenizer": job.state.output("tokenizer", "sha256"),
            "val_fraction": self.options.val_fraction,
            "code": job.code,
        }

    def _make_data(self, job: Job, key: str) -> Made:
        from trainer.data.encode import ENCODE_ERRORS, corpus_files, encode_corpus  # noqa: PLC0415

        target = self.paths.data
        self._make_room(job.state, "data", target, "another corpus, tokenizer or trainer code")
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
        return Made(self._tree(target), {"sha256": sha256_file(target / "manifest.json")})

    def _shards_verify(self, job: Job) -> bool:
        from trainer.data.manifest import ShardError, load_manifest  # noqa: PLC0415

        try:
            load_manifest(self.paths.data, verify=True)
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

    def _last_step(self, job: Job) -> int:
        """The step this run ends at: --stop-after, else the schedule's end."""
        return self.options.stop_after or job.run_cfg.training.max_steps

    def _train_inputs(self, job: Job) -> dict:
        from trainer.train.checkpointing import identity_hash  # noqa: PLC0415

        # run.yaml is this stage's input: written (for where the run directory is now)
        # and checked before the key is taken.
        self._write_run_yaml()
        job.run_cfg = _load_config(self.paths.run_config, self.options.device, self.progress)
        # The run, not where it is: a moved run directory keeps the key and resumes. The
        # last step is not in it: a later --stop-after continues the same run.
        return {
            "run": identity_hash(job.run_cfg.to_json()),
            "data": job.state.output("data", "sha256"),
            "device": self.options.device,
        }

    def _trained_to_last_step(self, job: Job) -> bool:
        return job.state.result("train", "steps") == self._last_step(job)

    def _make_train(self, job: Job, key: str) -> Made:
        from trainer.checkpoint.layout import MANIFEST_FILE, step_of  # noqa: PLC0415
        from trainer.checkpoint.load import latest_valid  # noqa: PLC0415
        from trainer.train.apply import (  # noqa: PLC0415
            ApplyError,
            ApplyOptions,
            RunAbortedError,
            alert_line,
            apply_config,
            check_config,
            summary_line,
        )

        state, train, steps = job.state, self.paths.train, self._last_step(job)
        options = ApplyOptions(
            stop_after=self.options.stop_after, out=train.root, device=self.options.device
        )
        findings: list[str] = []  # said by the run itself; here only to explain a refusal
        try:  # before anything below moves a finished training aside or records a start
            check_config(self.paths.run_config, options, say=findings.append)
        except ApplyError as exc:
            for line in findings:
                self.progress(line)
            raise _failed("train", exc) from exc
        newest = latest_valid(train.checkpoints)[0] if train.root.is_dir() else None
        resume = None
        if state.same_key("train", key) and newest is not None and step_of(newest) <= steps:
            if state.stages["train"].get("status") == "done":  # a later --stop-after
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
        try:
            result, out_dir = apply_config(
                self.paths.run_config,
                replace(options, resume=resume),
                say=self.progress,
            )
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
        return Made(
            # The checkpoint the later stages read, every file of it, and the run's
            # record of its steps (the plots are drawn from it).
            self._tree(newest, train.metrics, train.training_state, train.manifest),
            {
                "checkpoint": self._rel(newest),
                "manifest_sha256": sha256_file(newest / MANIFEST_FILE),
                "steps": steps,
            },
        )

    def _checkpoint(self, job: Job) -> Path:
        """The checkpoint the training stage left (read by every stage after it)."""
        return self.out / job.state.output("train", "checkpoint")

    def _export_inputs(self, job: Job) -> dict:
        return {
            "checkpoint": job.state.output("train", "manifest_sha256"),
            "tokenizer": job.state.output("tokenizer", "sha256"),
            "code": job.code,
        }

    def _make_export(self, job: Job, key: str) -> Made:
        from trainer.checkpoint.export import EXPORT_ERRORS, export_checkpoint  # noqa: PLC0415

        target = self.paths.export
        self._make_room(
            job.state, "export", target, "another checkpoint, tokenizer or trainer code"
        )
        try:
            export_checkpoint(self._checkpoint(job), target, tokenizer_dir=self.paths.tokenizer)
        except EXPORT_ERRORS as exc:
            raise _failed("export", exc) from exc
        results = {
            "dir": self._rel(target),
            "model_sha256": sha256_file(target / "model.safetensors"),
            "bytes": _tree_bytes(target),
        }
        return Made(self._tree(target), results)

    def _baseline_inputs(self, job: Job) -> dict:
        return {
            "checkpoint": job.state.output("train", "manifest_sha256"),
            "data": job.state.output("data", "sha256"),
            "steps": _steps_done(self._checkpoint(job)),
            "eval_tokens": job.run_cfg.training.eval_tokens,
            "code": job.code,
        }

    def _make_baseline(self, job: Job, key: str) -> Made:
        from trainer.pipeline.baseline import measure_baseline  # noqa: PLC0415

        checkpoint = self._checkpoint(job)
        target = self.paths.baseline
        result = measure_baseline(job.run_cfg, checkpoint, steps=_steps_done(checkpoint))
        result["model"]["checkpoint"] = self._rel(checkpoint)
        atomic_write_json(target, result)
        note = (
            f"model ppl {result['model']['perplexity']:.1f} vs KN trigram "
            f"{result['kn_trigram']['perplexity']:.1f} on "
            f"{result['validation']['targets']:,} val targets"
        )
        return Made({self._rel(target): sha256_file(target)}, note=note)

    def _plots_inputs(self, job: Job) -> dict:
        return {"metrics": sha256_file(self.paths.train.metrics), "code": job.code}

    def _make_plots(self, job: Job, key: str) -> Made:
        from trainer.plot.write import PlotError, write_plots  # noqa: PLC0415

        target = self.paths.plots
        self._make_room(job.state, "plots", target, "the run's metrics or the trainer code changed")
        try:
            write_plots([self.paths.train.root], target)
        except PlotError as exc:
            raise _failed("plots", exc) from exc
        made = sorted(p.name for p in target.iterdir())
        results = {"files": [self._rel(target / n) for n in made]}
        return Made(self._tree(target), results, ", ".join(made))

    def _contract_files(self) -> list[Path]:
        return sorted(self.options.contracts.glob("*.yaml"))

    def _gates_inputs(self, job: Job) -> dict:
        contracts = self._contract_files()
        if not self.options.gates:
            raise Skipped("--no-gates: the gate table shows the contracts' status only")
        if not contracts:
            raise Skipped(
                f"no {self.options.contracts}/: the gate table shows the contracts' status only"
            )
        return {
            "checkpoint": job.state.output("train", "manifest_sha256"),
            "contracts": {p.name: sha256_file(p) for p in contracts},
            "code": {
                "trainer": job.code,
                "project": project_fingerprint(self.options.contracts, outside=self.out),
            },
        }

    def _make_gates(self, job: Job, key: str) -> Made:
        contracts = self._contract_files()
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
        note = ", ".join(f"{g} {c['verdict']}" for g, c in checks.items())
        return Made(outputs, {"checks": checks}, note)

    def _report_inputs(self, job: Job) -> dict:
        if not self._contract_files():
            raise Skipped(f"no {self.options.contracts}/")
        return {}

    def _make_report(self, job: Job, key: str) -> Made:
        from gates.report.inputs import ReportError, gather  # noqa: PLC0415
        from gates.report.page import render  # noqa: PLC0415

        target = self.paths.report
        plots = [self.out / p for p in job.state.output("plots", "files") if p.endswith(".svg")]
        valid = _valid_contracts(self._contract_files(), "report", self.progress)
        try:
            inputs = gather(valid, target, plots=plots)
        except ReportError as exc:
            raise _failed("report", f"`gates report`: {exc}; nothing written") from exc
        atomic_write_bytes(target, render(inputs).encode("utf-8"))
        return Made({self._rel(target): sha256_file(target)}, note=str(target))


#: The pipeline, in order. Stage numbers are places in this table.
STAGES = (
    Stage(
        "tokenizer",
        Pipeline._tokenizer_inputs,
        Pipeline._make_tokenizer,
        reused_note=lambda p, job: f"vocab {job.cfg.model.vocab_size}, same corpus",
    ),
    Stage(
        "data",
        Pipeline._data_inputs,
        Pipeline._make_data,
        intact=Pipeline._shards_verify,
        reused_note=lambda p, job: "shards verified by sha256",
    ),
    Stage(
        "train",
        Pipeline._train_inputs,
        Pipeline._make_train,
        intact=Pipeline._trained_to_last_step,
        reused_note=lambda p, job: f"{p._rel(p._checkpoint(job))} verified by sha256",
    ),
    Stage("export", Pipeline._export_inputs, Pipeline._make_export),
    Stage("baseline", Pipeline._baseline_inputs, Pipeline._make_baseline),
    Stage("plots", Pipeline._plots_inputs, Pipeline._make_plots),
    Stage("gates", Pipeline._gates_inputs, Pipeline._make_gates),
    # Made every time: a second or so, and its inputs (every evidence file, the audit)
    # are not worth a key of their own.
    Stage("report", Pipeline._report_inputs, Pipeline._make_report, keyed=False),
)


# ------------------------------------------------------------------ helpers
def inputs_overlap(out: Path, inputs: tuple[Path, ...]) -> str | None:
    """Why ``out`` and a corpus input cannot be used together, or None when each lies
    outside the other (compared resolved, path component by path component): a run
    directory inside the corpus would be read as corpus (its pipeline.json first, its own
    shards the next time), and a corpus inside the run directory is the pipeline's to
    move aside or replace."""
    run = Path(os.path.realpath(out))
    for given in inputs:
        source = Path(os.path.realpath(given))
        if run.is_relative_to(source):
            return (
                f"--out {out} lies inside --input {given}: the corpus would take in the "
                "run's own files (pipeline.json, then its tokenizer and shards); choose an "
                "--out outside every --input"
            )
        if source.is_relative_to(run):
            return (
                f"--input {given} lies inside --out {out}: the run directory's files are "
                "the pipeline's to replace; keep the corpus outside it"
            )
    return None


def _failed(stage: str, why: object, status: int = exit_codes.FINDINGS) -> PipelineError:
    """The error that ends the pipeline at ``stage``, and what to do about it."""
    return PipelineError(
        f"stage {stage}: {why}. Fix the cause and run the pipeline again: finished stages "
        "are reused",
        status=status,
    )


def _load_config(path: Path, device: str, show: Callable[[str], None]) -> RunConfig:
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


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
