"""How far the golden traces move when only the CPU's kernels change: the measurement behind
the tolerance of tests/unit/trainer/test_golden_traces.py.

    .venv/bin/python -m tests.golden.drift            # prints the table
    .venv/bin/python -m tests.golden.drift --out evidence/benchmarks/golden-trace-drift.json

Another CPU is emulated on this one by forcing the code paths its kernels would take: ATen's
vectorized kernels at a lower capability (``ATEN_CPU_CAPABILITY=avx2`` or ``default``, the
scalar fallback an ARM or an older x86 build takes for many ops) and MKL's GEMM at AVX2
(``MKL_ENABLE_INSTRUCTIONS=AVX2``: what MKL runs on an AMD CPU or an Intel one without
AVX-512). Each variant records every trace, straight and resumed, in a fresh interpreter,
in float64 (what the traces are) and in float32 (what they were before, for comparison);
the result is the largest relative difference of loss, grad norm and validation loss from
the unforced run, and whether the exact fields (step, epoch, lr, indices) agree. A variant
the machine cannot take (AVX-512 paths on an AVX2 CPU) is still run: the library falls back
to what the CPU has, and the machine's capability is recorded beside the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
FLOATS = ("loss", "grad_norm", "val_loss")
#: name -> the environment that forces another CPU's code paths.
VARIANTS = {
    "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "aten-default": {"ATEN_CPU_CAPABILITY": "default"},
    "mkl-avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "aten-avx2+mkl-avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}
_RECORD = """
import json, sys, torch
from tests.golden import traces
dtype = getattr(torch, sys.argv[1])
print(json.dumps({
    "capability": torch.backends.cpu.get_cpu_capability(),
    "traces": {
        name: {mode: traces.record(name, resume=mode == "resumed", dtype=dtype)
               for mode in ("straight", "resumed")}
        for name in sorted(traces.SPECS)
    },
}))
"""
_FORCING = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")


def _recorded(env: dict[str, str], dtype: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in _FORCING}
    done = subprocess.run(
        [sys.executable, "-c", _RECORD, dtype],
        cwd=ROOT,
        env=clean | env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def drift(base: dict, other: dict) -> dict:
    """The largest relative difference of each float field over every trace and mode, and
    whether every exact field agrees."""
    worst = dict.fromkeys(FLOATS, 0.0)
    exact = True
    for name, modes in base.items():
        for mode, steps in modes.items():
            theirs = other[name][mode]
            exact &= len(steps) == len(theirs)
            for mine, their in zip(steps, theirs, strict=False):
                exact &= set(mine) == set(their)
                for key in mine.keys() & their.keys():
                    if key in FLOATS:
                        a, b = float.fromhex(mine[key]), float.fromhex(their[key])
                        worst[key] = max(worst[key], abs(a - b) / abs(a))
                    else:
                        exact &= mine[key] == their[key]
    return {"max_relative": worst, "exact_fields_agree": exact}


def measure() -> dict:
    result: dict = {
        "machine": {"machine": platform.machine()},
        "variants": {name: env for name, env in VARIANTS.items()},
        "dtypes": {},
    }
    for dtype in ("float64", "float32"):
        base = _recorded({}, dtype)
        result["machine"]["cpu_capability"] = base["capability"]
        rows = {}
        for name, env in VARIANTS.items():
            other = _recorded(env, dtype)
            rows[name] = drift(base["traces"], other["traces"]) | {
                "capability": other["capability"]
            }
        worst = {k: max(r["max_relative"][k] for r in rows.values()) for k in FLOATS}
        result["dtypes"][dtype] = {"variants": rows, "max_relative": worst}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden.drift", description=__doc__)
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    args = parser.parse_args(argv)
    from gates.provenance.evidence import git_info, host_info, utc_now  # noqa: PLC0415

    result = measure()
    result["captured_at"] = utc_now()
    result["command"] = " ".join(["python -m tests.golden.drift", *(argv or sys.argv[1:])])
    result["host"] = host_info()
    result["git"] = git_info(ROOT)
    for dtype, found in result["dtypes"].items():
        for name, row in found["variants"].items():
            rel = " ".join(f"{k} {v:.1e}" for k, v in row["max_relative"].items())
            print(f"{dtype}  {name:20s} {rel}  exact fields agree: {row['exact_fields_agree']}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
