"""The reference trainer on a CUDA machine, end to end; write what was seen as JSON.

    python tools/cuda_smoke.py --out evidence/benchmarks/cuda-smoke-h100.json   # ~3 min on an H100

Each step is a fresh ``python -m trainer`` process, as a user runs it:

1. ``trainer pipeline --device cuda``: tokenizer, data, training, export, baseline, plots,
   gates and report, on the embedded corpus.
2. The pipeline's ``run.yaml`` trained for 200 steps twice (A, A2), and for 100 steps then
   resumed to 200 (B). The step-200 checkpoints are compared value by value: A against A2
   says whether a CUDA run repeats itself, A against B whether a resume changes anything.
3. ``trainer apply --compile`` for 100 steps: torch.compile on CUDA.
4. ``trainer plan --device cuda``: the measured step estimate and its MFU.

Without CUDA it refuses (exit 2) and writes nothing. The embedded corpus is the running
interpreter's standard library, so another Python version trains on other text.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gates.io.files import sha256_file  # noqa: E402
from gates.provenance.evidence import git_info, host_info, portable_path, utc_now  # noqa: E402
from trainer.checkpoint.layout import step_dir_name  # noqa: E402

TENSOR_FILES = ("model.safetensors", "optimizer.safetensors", "rng.safetensors")
TAIL_LINES = 14
WORK = Path("runs/cuda-smoke")  # under the project root (git ignores runs/)
_ABSOLUTE = re.compile(r"(?<![\w.])/[^\s:'\",)]+")


def portable_text(text: str) -> str:
    """``text`` with every absolute path as evidence records it
    (gates.provenance.evidence.portable_path)."""
    return _ABSOLUTE.sub(lambda m: portable_path(Path(m.group(0)), ROOT), text)


def compare_checkpoints(a: Path, b: Path) -> dict[str, dict[str, Any]]:
    """Per tensor file of checkpoints ``a`` and ``b``: whether the bytes are equal, how many
    values differ (of how many) and the largest absolute difference."""
    out = {}
    for name in TENSOR_FILES:
        left, right = load_file(str(a / name)), load_file(str(b / name))
        if sorted(left) != sorted(right):
            raise ValueError(f"{a / name} and {b / name} hold different tensor names")
        differing = total = 0
        worst = 0.0
        for key, x in left.items():
            y = right[key]
            if x.shape != y.shape or x.dtype != y.dtype:
                raise ValueError(f"{name}: {key} is {x.dtype} {tuple(x.shape)} vs {y.dtype} "
                                 f"{tuple(y.shape)}")  # fmt: skip
            unequal = x != y
            differing += int(unequal.sum())
            total += x.numel()
            if x.is_floating_point() and x.numel():
                worst = max(worst, float((x.double() - y.double()).abs().max()))
        same_bytes = sha256_file(a / name) == sha256_file(b / name)
        out[name] = {
            "bytes_equal": same_bytes,
            "differing_values": differing,
            "values": total,
            "max_abs_difference": worst,
        }
    return out


def _trainer(args: list[str], log: Path, timeout: int) -> dict[str, Any]:
    """Run ``python -m trainer ARGS``; its exit status, seconds and last lines."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trainer", *args],
            cwd=ROOT,  # run directories are given relative to it
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # one stream, in the order it was written
            text=True,
            timeout=timeout,
            check=False,
        )
        rc, text = done.returncode, done.stdout
    except subprocess.TimeoutExpired as exc:
        said = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout
        rc, text = None, f"timed out after {timeout} s\n{said or ''}"
    log.write_text(text)
    return {
        "command": "trainer " + " ".join(args),
        "exit_status": rc,
        "seconds": round(time.perf_counter() - started, 1),
        "tail": portable_text(text).splitlines()[-TAIL_LINES:],
    }


def _checkpoint(run: Path, step: int) -> Path:
    found = sorted(run.rglob(step_dir_name(step)))
    if not found:
        raise FileNotFoundError(f"{run}: no checkpoint of step {step}")
    return found[0]


def run_smoke(work: Path) -> dict[str, Any]:
    """The steps, in ``work`` (relative to the project root, where the trainer runs)."""
    logs = ROOT / work
    demo = work / "demo"
    config = demo / "run.yaml"
    steps: dict[str, dict[str, Any]] = {}
    steps["pipeline"] = _trainer(
        ["pipeline", "--device", "cuda", "--out", str(demo)], logs / "pipeline.log", 300
    )
    runs = {name: work / name for name in ("A", "A2", "B", "compiled")}
    for name in ("A", "A2"):
        args = ["apply", str(config), "--out", str(runs[name]), "--device", "cuda"]
        steps[name] = _trainer([*args, "--stop-after", "200"], logs / f"{name}.log", 120)
    b_args = ["apply", str(config), "--out", str(runs["B"]), "--device", "cuda"]
    steps["B to 100"] = _trainer([*b_args, "--stop-after", "100"], logs / "B1.log", 120)
    steps["B resumed to 200"] = _trainer(
        [*b_args, "--stop-after", "200", "--resume"], logs / "B2.log", 120
    )
    steps["compile"] = _trainer(
        ["apply", str(config), "--out", str(runs["compiled"]), "--device", "cuda", "--compile",
         "--stop-after", "100"],
        logs / "compile.log",
        240,
    )  # fmt: skip
    steps["plan"] = _trainer(["plan", str(config), "--device", "cuda"], logs / "plan.log", 120)
    compared: dict[str, Any] = {}
    for label, (left, right) in {
        "A vs A2 (two uninterrupted runs)": ("A", "A2"),
        "A vs B (B resumed at step 100)": ("A", "B"),
    }.items():
        try:
            compared[label] = compare_checkpoints(
                _checkpoint(ROOT / runs[left], 200), _checkpoint(ROOT / runs[right], 200)
            )
        except (OSError, ValueError) as exc:
            compared[label] = {"error": str(exc)}
    return {"steps": steps, "step_200_checkpoints": compared}


def _bitwise(comparison: dict[str, Any]) -> bool:
    return "error" not in comparison and all(f["bytes_equal"] for f in comparison.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the JSON here")
    parser.add_argument("--work", type=Path, default=WORK, help=f"run directories ({WORK})")
    parser.add_argument(
        "--commit", help="the commit measured, where this tree's git cannot tell (a copy)"
    )
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("cuda_smoke: CUDA is not available here; nothing run", file=sys.stderr)
        return 2
    if args.work.is_absolute():
        print("cuda_smoke: --work must be relative to the project root", file=sys.stderr)
        return 2
    if (ROOT / args.work).exists():
        print(f"cuda_smoke: {args.work} exists; remove it or name another --work", file=sys.stderr)
        return 2
    started = time.perf_counter()
    (ROOT / args.work).mkdir(parents=True)
    result = run_smoke(args.work)

    compared = result["step_200_checkpoints"]
    result["verdict"] = {
        "every_step_succeeded": all(s["exit_status"] == 0 for s in result["steps"].values()),
        "repeat_bitwise": _bitwise(compared["A vs A2 (two uninterrupted runs)"]),
        "resume_bitwise": _bitwise(compared["A vs B (B resumed at step 100)"]),
    }
    result["device"] = torch.cuda.get_device_name()
    result["torch"] = torch.__version__
    result["python"] = platform.python_version()
    result["cpu_count"] = os.cpu_count()
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["captured_at"] = utc_now()
    result["command"] = " ".join(["python", "tools/cuda_smoke.py", *(argv or sys.argv[1:])])
    result["host"] = host_info()
    if args.commit:  # a device machine's copy of the tree may carry another git history
        result["git"] = {"commit": args.commit, "dirty": None, "note": "as given by --commit"}
    else:
        result["git"] = git_info(ROOT)
    text = json.dumps(result, indent=2, allow_nan=False) + "\n"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(json.dumps(result["verdict"], indent=2))
    return 0 if result["verdict"]["every_step_succeeded"] else 1


if __name__ == "__main__":
    sys.exit(main())
