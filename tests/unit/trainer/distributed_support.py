"""Launching the data-parallel tests' processes: torchrun on CPU (gloo), one intra-op
thread per process (2 processes on a 2-core machine), a short collective timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHILD = "tests.unit.trainer.distributed_child"
TIMEOUT_S = 240


def child_env() -> dict[str, str]:
    """This environment (SHIPGATE_MUTANT included) for 1-thread CPU workers."""
    env = os.environ.copy()
    env |= {"OMP_NUM_THREADS": "1", "SHIPGATE_DIST_TIMEOUT_S": "60"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def torchrun_argv(nproc: int, module: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        "-m",
        module,
        *args,
    ]


def run_child(out: Path, spec: dict, *, nproc: int | None) -> dict:
    """distributed_child with ``spec`` on ``nproc`` torchrun ranks (None: one plain
    process, world size 1); returns rank 0's result.json with floats decoded ({NAME:
    result} for a spec of several "runs")."""
    out.mkdir(parents=True, exist_ok=True)
    spec_file = out / "spec.json"
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    args = (str(spec_file), str(out))
    argv = (
        [sys.executable, "-m", CHILD, *args]
        if nproc is None
        else torchrun_argv(nproc, CHILD, *args)
    )
    done = subprocess.run(
        argv,
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, _progress(out, spec) + done.stdout[-3000:] + done.stderr[-3000:]
    if "runs" in spec:
        return {name: read_result(out / name) for name in spec["runs"]}
    return read_result(out)


def run_here(out: Path, spec: dict) -> dict:
    """distributed_child's run of ``spec`` in this process (world size 1, this process's
    mutant, one intra-op thread as a rank has, the count restored after): the one-process
    reference without a second interpreter's start-up (~3 s of imports)."""
    import torch  # noqa: PLC0415

    from tests.unit.trainer import distributed_child  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    before = torch.get_num_threads()
    try:
        distributed_child.run(spec, out)
    finally:
        torch.set_num_threads(before)
    return read_result(out)


def _progress(out: Path, spec: dict) -> str:
    """How far a failed launch got: the runs whose result.json rank 0 wrote (each rank says
    on stderr when it has finished and left the process group)."""
    names = list(spec["runs"]) if "runs" in spec else [""]
    written = [name or "result.json" for name in names if (out / name / "result.json").exists()]
    return f"result.json written for: {', '.join(written) or 'none'} of {len(names)}\n"


def read_result(out: Path) -> dict:
    """distributed_child's OUT/result.json with the floats decoded."""
    result = json.loads((out / "result.json").read_text(encoding="utf-8"))
    for key in ("losses", "grad_norms"):
        result[key] = [float.fromhex(x) for x in result[key]]
    return result


def children_of(pid: int) -> list[int]:
    """Process ids whose parent is ``pid`` (from /proc; Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def rank_of(pid: int) -> int | None:
    """The RANK in a process's environment (None when it has none or is gone)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in environ:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None
