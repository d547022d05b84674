"""Measurements of C-TRAINING-LOOP's checkpoint gates (contracts/training-loop-v1.yaml):
resume is the run that never stopped (GATE-TRAIN-LOOP-012), no fault while saving leaves
a checkpoint the loader takes (-013), checkpoints land where they must and nowhere else
(-014), the export holds every trained byte (-015), and no pickle anywhere (-016).

Each is measured on one artifact, a loop run directory made by tools/make_loop_run.py
(run.yaml, tokenizer/, data/, train/ with its checkpoints), pinned by sha256 in the
evidence; LOOP_RUN is its recipe, so `gates check` rebuilds it where it is missing. run.yaml's
paths are relative to the run directory, so every `trainer apply run.yaml` here runs there.
The measurements drive the real CLI (`trainer apply`, `trainer export`,
`trainer inspect`) in fresh processes where the contract says "new process", read files
by their bytes, and are written from the contract's rules, independently of the bound
tests. Scratch copies live in a temporary directory; the artifact is never written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gates.measure import GateContext, Measurement, measures
from gates.provenance.recipes import Recipe
from tests.checkpoint_digests import bytes_as_listed

ARTIFACT = "loop run directory (tools/make_loop_run.py)"
#: How the artifact is rebuilt (gates.provenance.recipes). Left out of its digest: what the clock
#: and the host put in it, not what was trained.
LOOP_RUN = Recipe(
    command=("python", "tools/make_loop_run.py", "--out", "{out}"),
    name="loop-run",
    seed=42,  # run.yaml's training.seed default; the tokenizer and data are deterministic
    exclude=("train/runs.db", "train/.writer.lock"),
    volatile={
        "train/metrics.jsonl": ("tokens_per_s", "step_s", "mfu", "peak_fraction"),
        "train/training_state.json": (
            "ended_at",
            "tokens_per_s",
            "step_s",
            "mfu",
            "peak_fraction",
        ),
        "train/run_manifest.json": ("created", "run_started", "run_id", "host", "git"),
    },
    reason=(
        "train/runs.db is the run store's SQLite file (wall-clock times, a random run id; "
        "rebuilt from the run's files by `trainer runs sync`); train/.writer.lock records "
        "which process last held the run directory's writer lock; tokens_per_s, step_s, mfu and "
        "peak_fraction are timings; created, run_started and ended_at are clock times; run_id "
        "is random; host and git say where and at which commit it was built, not what was trained"
    ),
    bitwise_across_machines=False,
    why_not_bitwise=(
        "float32 training on CPU: weights and losses depend on the torch build and the CPU's "
        "kernels (AVX2 vs AVX-512); the tokenizer and shards are read from this Python's "
        "standard library; run_manifest.json records the package versions"
    ),
    env={"SHIPGATE_HOME": "{scratch}"},  # the run registry: not the user's
)
_STEP_DIR = re.compile(r"^step-(\d{8})$")
# The CLI, with $SHIPGATE_MUTANT applied when set (never in a promotion): how a seeded
# defect is shown to move these measurements. argv[1] is the project root (the mutants'
# home); the process may run elsewhere (in the run directory).
_TRAINER = (
    "import sys; from pathlib import Path; from gates import mutants; "
    "mutants.apply_from_env(Path(sys.argv[1])); from trainer.cli import main; "
    "sys.exit(main(sys.argv[2:]))"
)
_TIMEOUT = 600


def _is_loop_run(path: Path) -> str | None:
    for needed in ("run.yaml", "train/metrics.jsonl", "train/checkpoints"):
        if not (path / needed).exists():
            return f"no {needed} (make one with tools/make_loop_run.py)"
    if not _checkpoints(path / "train" / "checkpoints"):
        return "train/checkpoints holds no step-NNNNNNNN directory"
    return None


def _checkpoints(directory: Path) -> dict[int, Path]:
    """step -> directory, for names of the form step-NNNNNNNN (staging names excluded)."""
    if not directory.is_dir():
        return {}
    found = {}
    for path in directory.iterdir():
        match = _STEP_DIR.match(path.name)
        if match and path.is_dir():
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def _name(run: Path) -> str:
    """The run as evidence names it: its name, not where this machine keeps it (the cache)."""
    return run.name


def _shown(text: str, root: Path, scratch: Path) -> str:
    """A line of the trainer's output with no path of this machine in it (pv refuses an
    absolute path in evidence): the scratch directory and the project root named, not
    spelled out."""
    for path, name in ((scratch, "<scratch>"), (root, "<root>")):
        for spelled in dict.fromkeys((str(path.resolve()), str(path))):
            text = text.replace(spelled, name)
    return text


def _trainer(
    root: Path, *args: str, cwd: Path | None = None, timeout: float = _TIMEOUT
) -> subprocess.CompletedProcess:
    """The trainer CLI in a new process, in ``cwd`` (default: the project root)."""
    return subprocess.run(
        [sys.executable, "-c", _TRAINER, str(root), *args],
        cwd=cwd or root,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _config(run: Path) -> dict:
    import yaml  # noqa: PLC0415

    return yaml.safe_load((run / "run.yaml").read_text(encoding="utf-8"))


def _metrics(path: Path) -> dict[int, dict]:
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        rows[row["step"]] = row
    return rows


def _safetensors_header(path: Path) -> dict:
    """The JSON header of a safetensors file, read from its bytes."""
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    header.pop("__metadata__", None)
    return header


def _tensor_bytes(path: Path) -> dict[str, bytes]:
    """name -> raw little-endian bytes of each tensor, read from the file's bytes."""
    with open(path, "rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
        data = fh.read()
    header.pop("__metadata__", None)
    return {name: data[v["data_offsets"][0] : v["data_offsets"][1]] for name, v in header.items()}


def _element_size(path: Path) -> dict[str, int]:
    sizes = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "U8": 1, "BOOL": 1}
    return {name: sizes[v["dtype"]] for name, v in _safetensors_header(path).items()}


def _differing_elements(a: Path, b: Path) -> tuple[int, int]:
    """(elements that differ bitwise or exist on one side only, elements compared)."""
    left, right = _tensor_bytes(a), _tensor_bytes(b)
    width = _element_size(a) | _element_size(b)
    differ = compared = 0
    for name in left.keys() | right.keys():
        x, y = left.get(name), right.get(name)
        size = width[name]
        if x is None or y is None or len(x) != len(y):
            differ += max(len(x or b""), len(y or b"")) // size
            continue
        compared += len(x) // size
        if x != y:
            differ += sum(x[i : i + size] != y[i : i + size] for i in range(0, len(x), size))
    return differ, compared


def _json_leaves(obj, prefix: str = "") -> dict[str, object]:
    if isinstance(obj, dict):
        return {
            k: v
            for key, val in obj.items()
            for k, v in _json_leaves(val, f"{prefix}/{key}").items()
        }
    if isinstance(obj, list):
        return {
            k: v for i, val in enumerate(obj) for k, v in _json_leaves(val, f"{prefix}/{i}").items()
        }
    return {prefix: obj}


def _differing_json(a: Path, b: Path) -> tuple[int, int]:
    left = _json_leaves(json.loads(a.read_text(encoding="utf-8")))
    right = _json_leaves(json.loads(b.read_text(encoding="utf-8")))
    keys = left.keys() | right.keys()
    return sum(left.get(k, ...) != right.get(k, ...) for k in keys), len(keys)


# --- GATE-TRAIN-LOOP-012 -------------------------------------------------------------


@measures("GATE-TRAIN-LOOP-012", artifact=ARTIFACT, check=_is_loop_run, recipe=LOOP_RUN)
def differing_values_after_resume(ctx: GateContext) -> Measurement:
    run = ctx.artifacts[0]
    saved = _checkpoints(run / "train" / "checkpoints")
    final_step = max(saved)
    straight = _metrics(run / "train" / "metrics.jsonl")
    resumes = [step for step in saved if step < final_step]
    if not resumes:
        raise ValueError(f"{run}: only the final checkpoint is left; nothing to resume from")
    differ = compared = 0
    per_resume = {}
    with tempfile.TemporaryDirectory(prefix="gate-012-") as tmp:
        for step in resumes:
            out = Path(tmp) / f"resume-{step}"
            done = _trainer(
                ctx.root, "apply", "run.yaml", "--device", "cpu",
                "--out", str(out), "--resume", str(saved[step]), cwd=run,
            )  # fmt: skip
            mine = _checkpoints(out / "checkpoints").get(final_step)
            theirs = saved[final_step]
            counted: dict[str, tuple[int, int]] = {
                "exit status": (int(done.returncode != 0), 1),
                "final checkpoint": (int(mine is None), 1),
            }
            if mine is not None:
                for name in ("model.safetensors", "optimizer.safetensors", "rng.safetensors"):
                    counted[name] = _differing_elements(mine / name, theirs / name)
                for name in ("state.json", "rng.json"):
                    counted[name] = _differing_json(mine / name, theirs / name)
            resumed = _metrics(out / "metrics.jsonl") if mine is not None else {}
            later = [s for s in straight if s > step]
            keys = ("loss", "grad_norm", "lr", "epoch", "tokens")
            counted["metrics.jsonl"] = (
                sum(resumed.get(s, {}).get(k) != straight[s][k] for s in later for k in keys)
                + sum(1 for s in resumed if s <= step or s not in straight),  # extra rows
                len(keys) * len(later),
            )
            n_differ = sum(d for d, _ in counted.values())
            n_compared = sum(c for _, c in counted.values())
            per_resume[str(step)] = {name: list(dc) for name, dc in counted.items()}
            if done.returncode != 0:
                per_resume[str(step)]["stderr"] = done.stderr[-1000:]
            differ, compared = differ + n_differ, compared + n_compared
    return Measurement(
        values={
            "differing_values_after_resume": (differ, "values"),
            "values_compared": (compared, "values"),
            "resumes": (len(resumes), "runs"),
        },
        workload=(
            f"{_name(run)}: for each checkpoint before the final step {final_step} "
            f"({resumes}), `trainer apply run.yaml --resume CKPT` in a new process; its "
            f"step-{final_step} checkpoint (weights, AdamW exp_avg/exp_avg_sq/step, RNG "
            "tensors, rng.json, state.json: scheduler step, data position, guards) compared "
            "bitwise with the uninterrupted run's, and its metrics rows (loss, grad_norm, "
            "lr, epoch, tokens) with the uninterrupted run's for every later step"
        ),
        parameters={"final_step": final_step, "per_resume": per_resume},
    )


# --- GATE-TRAIN-LOOP-013 -------------------------------------------------------------


def _independently_valid(ckpt: Path) -> bool:
    """Every file the manifest lists exists with its size and digests, nothing else is
    there, the manifest's step is the directory's, and the safetensors headers parse."""
    manifest_path = ckpt / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = manifest["files"]
        if f"step-{manifest['step']:08d}" != ckpt.name:
            return False
        if {p.name for p in ckpt.iterdir()} != {*files, "manifest.json"}:
            return False
        for name, entry in files.items():
            if not bytes_as_listed(ckpt / name, entry):
                return False
            if name.endswith(".safetensors"):
                _safetensors_header(ckpt / name)
        return True
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return False


def _flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _damages(newest: Path) -> dict[str, object]:
    """Named ways to damage the newest checkpoint in place (a scratch copy of it)."""
    names = sorted(p.name for p in newest.iterdir())
    cases: dict[str, object] = {
        f"flipped byte in {n}": (lambda d, n=n: _flip_byte(d / n)) for n in names
    }

    def truncate(d: Path) -> None:
        model = d / "model.safetensors"
        model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])

    cases |= {
        "truncated model.safetensors": truncate,
        "manifest deleted": lambda d: (d / "manifest.json").unlink(),
        "file the manifest names deleted": lambda d: (d / "optimizer.safetensors").unlink(),
        "pickle planted as extra.pt": lambda d: (d / "extra.pt").write_bytes(b"\x80\x04K\x01."),
    }
    return cases


def _save_child(source: str, run_dir: str, kill_at: int) -> None:
    """In a fresh process: load checkpoint ``source`` and save it as the next step into
    ``run_dir``, SIGKILLing this process at its ``kill_at``-th fsync (0: never)."""
    import dataclasses  # noqa: PLC0415

    from trainer.checkpoint import load, save  # noqa: PLC0415
    from trainer.model.config import LlamaConfig  # noqa: PLC0415
    from trainer.model.llama import build_model  # noqa: PLC0415
    from trainer.train.optim import build_adamw  # noqa: PLC0415

    manifest = json.loads((Path(source) / "manifest.json").read_text(encoding="utf-8"))
    model = build_model(LlamaConfig(**manifest["architecture"]), seed=0)
    optimizer = build_adamw(model, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    state = load.load_checkpoint(Path(source), model, optimizer)
    real_fsync, calls = os.fsync, [0]

    def fsync_then_maybe_die(fd: int) -> None:
        real_fsync(fd)
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    os.fsync = fsync_then_maybe_die
    step = state.step + 1
    save.save_checkpoint(
        Path(run_dir),
        step=step,
        model=model,
        optimizer=optimizer,
        # The schedule moves with the step: a state whose scheduler step lags it is one
        # inspect and resume both refuse (trainer/checkpoint/state.py scheduler_problem).
        state=dataclasses.replace(state, step=step, scheduler_step=step),
    )
    print(json.dumps({"fsyncs": calls[0]}))


def _loader_choice(run_dir: Path) -> Path | None:
    from trainer.checkpoint.load import latest_valid  # noqa: PLC0415

    chosen, _ = latest_valid(run_dir)
    return chosen


@measures("GATE-TRAIN-LOOP-013", artifact=ARTIFACT, check=_is_loop_run, recipe=LOOP_RUN)
def corrupt_checkpoints_loaded(ctx: GateContext) -> Measurement:
    run = ctx.artifacts[0]
    saved = _checkpoints(run / "train" / "checkpoints")
    if len(saved) < 2:
        raise ValueError(f"{run}: needs two checkpoints (a damaged newest and a fallback)")
    newest_step = max(saved)
    outcomes: dict[str, dict] = {}
    bad = 0
    with tempfile.TemporaryDirectory(prefix="gate-013-") as tmp:

        def scratch(name: str) -> Path:
            copy = Path(tmp) / re.sub(r"\W+", "-", name)
            shutil.copytree(run / "train" / "checkpoints", copy)
            return copy

        # Damaged newest checkpoint: the loader must fall back to an intact older one.
        for name, damage in _damages(saved[newest_step]).items():
            copy = scratch(name)
            damage(copy / saved[newest_step].name)
            chosen = _loader_choice(copy)
            wrong = chosen is None or chosen.name == saved[newest_step].name
            wrong = wrong or not _independently_valid(chosen)
            outcomes[name] = {"chosen": chosen.name if chosen else None, "wrong": wrong}
            bad += wrong
        # SIGKILL while saving the next step, at every fsync of the save, then once unkilled.
        kill_at, finished = 1, False
        while not finished and kill_at < 64:
            copy = scratch(f"kill at fsync {kill_at}")
            code = (
                "import sys; from pathlib import Path; from gates import mutants; "
                "mutants.apply_from_env(Path.cwd()); "
                "from tests.measurements.training_loop_checkpoint import _save_child; "
                "_save_child(sys.argv[1], sys.argv[2], int(sys.argv[3]))"
            )
            child = subprocess.run(
                [sys.executable, "-c", code, str(copy / saved[newest_step].name), str(copy),
                 str(kill_at)],
                cwd=ctx.root, capture_output=True, text=True, timeout=_TIMEOUT, check=False,
            )  # fmt: skip
            finished = child.returncode == 0
            if child.returncode not in (0, -signal.SIGKILL):
                raise RuntimeError(f"the saving child failed: {child.stderr[-2000:]}")
            chosen = _loader_choice(copy)
            new = copy / f"step-{newest_step + 1:08d}"
            # The new step may be chosen only when its directory was published whole.
            expected = new.name if new.is_dir() and _independently_valid(new) else None
            # A final name never holds a partial checkpoint, loadable or not.
            partial = new.is_dir() and expected is None
            wrong = chosen is None or not _independently_valid(chosen)
            wrong = wrong or chosen.name not in {expected, saved[newest_step].name} - {None}
            wrong = wrong or (finished and chosen.name != new.name) or partial
            label = "save finished unkilled" if finished else f"SIGKILL at fsync {kill_at}"
            outcomes[label] = {
                "chosen": chosen.name if chosen else None,
                "partial_under_final_name": partial,
                "wrong": wrong,
            }
            bad += wrong
            kill_at += 1
        if not finished:
            raise RuntimeError("the save never finished within 64 fsyncs")
    return Measurement(
        values={
            "corrupt_checkpoints_loaded": (int(bad), "checkpoints"),
            "fault_cases": (len(outcomes), "cases"),
        },
        workload=(
            f"{_name(run)}: scratch copies of train/checkpoints; (a) the newest checkpoint "
            f"(step {newest_step}) damaged - a byte flipped in each file, model file "
            "truncated, manifest deleted, a listed file deleted, a pickle planted - then the "
            "loader (latest_valid) asked for a checkpoint; (b) a fresh process loading step "
            f"{newest_step} and saving step {newest_step + 1} SIGKILLed at its 1st, 2nd, ... "
            "fsync (after each data file, after the manifest, before and after the rename, "
            "after the latest pointer) until a save finishes. Counted: every case where the "
            "loader chose nothing, a damaged or partial checkpoint, or the half-written new "
            "step; a partial directory under a final step-NNNNNNNN name; and a finished save "
            "not chosen. Validity re-checked independently "
            "(manifest sizes and sha256 from the bytes, no unlisted files, headers parse)."
        ),
        parameters={"outcomes": outcomes},
    )


# --- GATE-TRAIN-LOOP-014 -------------------------------------------------------------


def _absolute_config(run: Path, scratch: Path, name: str, **training) -> Path:
    """A copy of run.yaml with absolute data paths (its own are relative to the run
    directory) and some training fields changed."""
    import yaml  # noqa: PLC0415

    cfg = _config(run)
    for key in ("shards", "tokenizer"):
        cfg["data"][key] = str((run / cfg["data"][key]).resolve())
    cfg["training"] = cfg["training"] | training
    path = scratch / name
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def _nan_at_forward(config: Path, out: Path, forward: int) -> int:
    """`trainer apply` in this process with the model's output NaN at its Nth forward."""
    import contextlib  # noqa: PLC0415
    import io  # noqa: PLC0415
    import math  # noqa: PLC0415

    from trainer import cli  # noqa: PLC0415
    from trainer.train import loop  # noqa: PLC0415

    real_build, seen = loop.build_model, [0]

    def poisoned(cfg, **kwargs):
        model = real_build(cfg, **kwargs)

        def hook(module, args, output):
            seen[0] += 1
            return output * math.nan if seen[0] == forward else output

        model.register_forward_hook(hook)
        return model

    loop.build_model = poisoned
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return cli.main(["apply", str(config), "--device", "cpu", "--out", str(out)])
    finally:
        loop.build_model = real_build


def _valid_steps(directory: Path) -> set[int]:
    return {s for s, p in _checkpoints(directory).items() if _independently_valid(p)}


@measures("GATE-TRAIN-LOOP-014", artifact=ARTIFACT, check=_is_loop_run, recipe=LOOP_RUN)
def missing_checkpoints(ctx: GateContext) -> Measurement:
    run = ctx.artifacts[0]
    training = _config(run)["training"]
    interval, max_steps = training["save_interval"], training["max_steps"]
    cases: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gate-014-") as tmp:
        scratch = Path(tmp)
        # 1. A whole run: a checkpoint at every multiple of save_interval and at max_steps.
        done = _trainer(ctx.root, "apply", "run.yaml", "--device", "cpu",
                        "--out", str(scratch / "whole"), cwd=run)  # fmt: skip
        expected = {*range(interval, max_steps + 1, interval), max_steps}
        said = re.search(r"checkpoints at steps \[([\d, ]*)\]", done.stdout)
        written = {int(s) for s in said.group(1).split(",") if s.strip()} if said else set()
        cases["whole run"] = {
            "expected": sorted(expected),
            "written": sorted(written),
            "exit": done.returncode,
            "missing": len(expected - written) + (done.returncode != 0),
            "extra": len(written - expected),
        }
        final_left = max_steps in _valid_steps(run / "train" / "checkpoints")
        cases["artifact's final step"] = {"missing": int(not final_left), "extra": 0}
        # 2. SIGTERM during a long run: exit 0 with a checkpoint of the last finished step.
        long = _absolute_config(run, scratch, "long.yaml", max_steps=20_000,
                                epochs=10, save_interval=25, eval_interval=100_000)  # fmt: skip
        out = scratch / "sigterm"
        proc = subprocess.Popen(
            [sys.executable, "-c", _TRAINER, str(ctx.root), "apply", str(long), "--device",
             "cpu", "--out", str(out)],
            cwd=ctx.root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + _TIMEOUT
        while not _checkpoints(out / "checkpoints") and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=_TIMEOUT)
        steps = _metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else {}
        last = max(steps, default=0)
        left = _valid_steps(out / "checkpoints")
        cases["SIGTERM"] = {
            "exit": proc.returncode,
            "last_step": last,
            "newest_checkpoint": max(left, default=None),
            "missing": int(proc.returncode != 0) + int(last not in left) + int(last >= 20_000),
            "extra": 0,
        }
        if proc.returncode != 0:
            cases["SIGTERM"]["stderr"] = stderr[-1000:]
        # 3. A NaN loss at step 27 of 35 with save_interval 10: exit non-zero, 10 and 20 only.
        short = _absolute_config(run, scratch, "nan.yaml", max_steps=35, warmup_steps=3,
                                 save_interval=10, eval_interval=100_000)  # fmt: skip
        status = _nan_at_forward(short, scratch / "nan", forward=27)
        left = _valid_steps(scratch / "nan" / "checkpoints")
        present = set(_checkpoints(scratch / "nan" / "checkpoints"))
        cases["NaN at step 27"] = {
            "exit": status,
            "checkpoints": sorted(present),
            "missing": int(status == 0) + len({10, 20} - left),
            "extra": len(present - {10, 20}),
        }
    missing = sum(c["missing"] + c["extra"] for c in cases.values())
    return Measurement(
        values={"missing_checkpoints": (missing, "checkpoints")},
        workload=(
            f"{_name(run)}: (1) `trainer apply run.yaml` again (save_interval {interval}, "
            f"max_steps {max_steps}): the checkpoints it reports against every multiple of the "
            "interval and the last step, and the artifact's final checkpoint is there and "
            "verifies; (2) the same data with max_steps 20,000 and save_interval 25, "
            "SIGTERM once the first checkpoint exists: exit 0 and a verifying checkpoint of "
            "the last step in metrics.jsonl; (3) max_steps 35, save_interval 10, the "
            "model's output NaN at its 27th forward (step 27): non-zero exit and "
            "checkpoints 10 and 20 only. Counted: missing checkpoints, wrong exits, and "
            "checkpoints that should not exist (an aborted step's, one off the interval)."
        ),
        parameters={"cases": cases},
    )


# --- GATE-TRAIN-LOOP-015 -------------------------------------------------------------


def _empty_model_checkpoint(source: Path, target: Path) -> None:
    """A copy of checkpoint ``source`` whose model file holds no tensor, with a manifest
    that agrees with the new bytes (so only the export's own checks can refuse it)."""
    import hashlib  # noqa: PLC0415

    shutil.copytree(source, target)
    header = b"{}" + b" " * 6
    (target / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    data = (target / "model.safetensors").read_bytes()
    manifest["files"]["model.safetensors"] = {
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def _init_tensor_bytes(ckpt: Path) -> dict[str, bytes]:
    """The weights a fresh build with the run's seed would have: what training changed."""
    from safetensors.torch import save  # noqa: PLC0415

    from trainer.model.config import LlamaConfig  # noqa: PLC0415
    from trainer.model.llama import build_model  # noqa: PLC0415

    manifest = json.loads((ckpt / "manifest.json").read_text(encoding="utf-8"))
    seed = json.loads((ckpt / "state.json").read_text(encoding="utf-8"))["seed"]
    model = build_model(LlamaConfig(**manifest["architecture"]), seed=seed)
    blob = save({k: v.contiguous() for k, v in model.state_dict().items()})
    (length,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + length])
    header.pop("__metadata__", None)
    data = blob[8 + length :]
    return {n: data[v["data_offsets"][0] : v["data_offsets"][1]] for n, v in header.items()}


@measures("GATE-TRAIN-LOOP-015", artifact=ARTIFACT, check=_is_loop_run, recipe=LOOP_RUN)
def export_tensor_bytes_shortfall(ctx: GateContext) -> Measurement:
    run = ctx.artifacts[0].resolve()  # the exports below run inside it
    saved = _checkpoints(run / "train" / "checkpoints")
    newest = saved[max(saved)]
    trained = _tensor_bytes(newest / "model.safetensors")
    expected_bytes = sum(len(b) for b in trained.values())
    init = _init_tensor_bytes(newest)
    with tempfile.TemporaryDirectory(prefix="gate-015-") as tmp:
        out = Path(tmp) / "export"
        # In the run directory, naming its tokenizer/: the tokenizer path a checkpoint
        # records is relative to where training ran (the recipe's run directory, the
        # repository root for `make demo`'s), and this gate is about the tensors.
        tokenizer = ["--tokenizer", str(run / "tokenizer")] if (run / "tokenizer").is_dir() else []
        done = _trainer(ctx.root, "export", str(newest), "--out", str(out), *tokenizer, cwd=run)
        exported = _tensor_bytes(out / "model.safetensors") if done.returncode == 0 else {}
        missing = sum(len(b) for n, b in trained.items() if exported.get(n) != b)
        untrained = sum(len(b) for n, b in exported.items() if init.get(n) == b)
        files = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        empty_src = Path(tmp) / newest.name
        _empty_model_checkpoint(newest, empty_src)
        refused_out = Path(tmp) / "empty-export"
        refused = _trainer(
            ctx.root, "export", str(empty_src), "--out", str(refused_out), *tokenizer, cwd=run
        )
        empty_written = refused.returncode == 0 or refused_out.exists()
    shortfall = missing + untrained + (expected_bytes if empty_written else 0)
    return Measurement(
        values={
            "export_tensor_bytes_shortfall": (shortfall, "bytes"),
            "exported_tensor_bytes": (sum(len(b) for b in exported.values()), "bytes"),
            "checkpoint_tensor_bytes": (expected_bytes, "bytes"),
            "exported_tensors": (len(exported), "tensors"),
        },
        workload=(
            f"{_name(run)}: `trainer export {newest.name}` read back by its bytes: every tensor of "
            "the checkpoint's model.safetensors must be in the export with identical bytes "
            "and differ from the fresh build with the run's seed; then `trainer export` of a "
            "copy whose model file holds no tensor (manifest rehashed to agree) must exit "
            "non-zero and write nothing. Shortfall = bytes missing or different + bytes "
            "equal to the untrained init + the whole model if the empty export was written."
        ),
        parameters={
            "export_files": files,
            "export_exit": done.returncode,
            "empty_export_exit": refused.returncode,
            "empty_export_refusal": [
                _shown(line, ctx.root, Path(tmp))
                for line in refused.stderr.strip().splitlines()[-1:]
            ],
            "missing_or_different_bytes": missing,
            "bytes_equal_to_init": untrained,
        },
    )


# --- GATE-TRAIN-LOOP-016 -------------------------------------------------------------

_FORBID_PICKLE = """
import json, pickle, sys, torch
from pathlib import Path
from gates import mutants
mutants.apply_from_env(Path(sys.argv[3]))
from trainer.cli import main
calls = []
def forbid(owner, name):
    def called(*args, **kwargs):
        calls.append(name)
        raise RuntimeError(f"{name} called")
    setattr(owner, name.split(".")[-1], called)
def forbid_class(owner, name):
    # A subclass, not a function: modules imported later may subclass it.
    base = getattr(owner, name.split(".")[-1])
    def refuse(self, *args, **kwargs):
        calls.append(name)
        raise RuntimeError(f"{name} called")
    setattr(owner, name.split(".")[-1], type(base.__name__, (base,), {"__init__": refuse}))
for n in ("dump", "dumps", "load", "loads"):
    forbid(pickle, f"pickle.{n}")
for n in ("Pickler", "Unpickler"):
    forbid_class(pickle, f"pickle.{n}")
forbid(torch, "torch.save")
forbid(torch, "torch.load")
config, out = sys.argv[1], Path(sys.argv[2])
status = {}
try:
    status["save"] = main(["apply", config, "--device", "cpu", "--out", str(out / "a")])
    first = sorted((out / "a" / "checkpoints").glob("step-*"))[0]
    status["resume"] = main(["apply", config, "--device", "cpu", "--out", str(out / "b"),
                             "--resume", str(first)])
    last = sorted((out / "b" / "checkpoints").glob("step-*"))[-1]
    status["export"] = main(["export", str(last), "--out", str(out / "export")])
    status["inspect"] = main(["inspect", str(last)])
finally:
    print(json.dumps({"calls": calls, "status": status}))
"""

_PICKLE_MAGIC = (b"\x80", b"PK\x03\x04")


def _state_file_problems(directory: Path) -> list[str]:
    """Files under ``directory`` that are not safetensors or JSON that parse, or that
    start like a pickle or a torch.save zip. Plain-text pointers (``latest``) and the
    tokenizer's merges.txt are allowed when they are UTF-8 text."""
    problems = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        head = path.read_bytes()[:4]
        if head[:1] == _PICKLE_MAGIC[0] or head == _PICKLE_MAGIC[1]:
            problems.append(f"{path}: starts like a pickle or a torch.save zip")
        elif path.suffix == ".safetensors":
            try:
                _safetensors_header(path)
            except (ValueError, struct.error) as exc:
                problems.append(f"{path}: safetensors header does not parse ({exc})")
        elif path.suffix == ".json":
            try:
                json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                problems.append(f"{path}: not JSON ({exc})")
        elif path.name in ("latest", "merges.txt"):
            try:
                path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                problems.append(f"{path}: not text")
        else:
            problems.append(f"{path}: neither .safetensors nor .json")
    return problems


@measures("GATE-TRAIN-LOOP-016", artifact=ARTIFACT, check=_is_loop_run, recipe=LOOP_RUN)
def pickle_operations(ctx: GateContext) -> Measurement:
    run = ctx.artifacts[0]
    with tempfile.TemporaryDirectory(prefix="gate-016-") as tmp:
        out = Path(tmp)
        child = subprocess.run(
            [sys.executable, "-c", _FORBID_PICKLE, "run.yaml", str(out), str(ctx.root)],
            cwd=run, capture_output=True, text=True, timeout=_TIMEOUT, check=False,
        )  # fmt: skip
        report = json.loads(child.stdout.strip().splitlines()[-1])
        failed = {k: v for k, v in report["status"].items() if v != 0}
        if child.returncode != 0 or set(report["status"]) != {
            "save",
            "resume",
            "export",
            "inspect",
        }:
            failed["process"] = child.returncode
        scanned = [run / "train" / "checkpoints", out / "a" / "checkpoints",
                   out / "b" / "checkpoints", out / "export"]  # fmt: skip
        problems = [p for d in scanned if d.is_dir() for p in _state_file_problems(d)]
        files = sum(1 for d in scanned if d.is_dir() for p in d.rglob("*") if p.is_file())
    operations = len(report["calls"]) + len(problems) + len(failed)
    return Measurement(
        values={
            "pickle_operations": (operations, "calls"),
            "files_scanned": (files, "files"),
        },
        workload=(
            f"{_name(run)}: in a fresh process with pickle.dump/dumps/load/loads/Pickler/"
            "Unpickler, torch.save and torch.load replaced by functions that count and "
            "raise: `trainer apply run.yaml` (periodic and final saves), `trainer apply "
            "--resume` from its first checkpoint, `trainer export` and `trainer inspect` of "
            "the resumed run's last checkpoint; then every file of the artifact's and these "
            "runs' checkpoint directories and of the export scanned by its bytes. Counted: "
            "calls, files that are not parsing safetensors/JSON (or a text pointer) or "
            "start like a pickle / torch.save zip, and any stage that did not succeed."
        ),
        parameters={
            "calls": report["calls"],
            "file_problems": problems[:20],
            "failed_stages": failed,
        },
    )
