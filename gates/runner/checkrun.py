"""Re-measure many gates, each in a process of its own, several at a time: ``gates check GATE``
less the validation its caller did once (gates.cli.check_one).

``gates check --ship-blocking`` runs every ship-blocking gate this way (CI, at HEAD):

- a **timed** gate (its measurement compares this machine's wall time or memory side by
  side, ``@measures(..., timed=True)``) runs alone: nothing else holds a core while it times;
  the timed gates go first, one after the other, on a quiet machine;
- every other gate runs ``jobs`` at a time, gates that build an artifact first (they take
  longest); gates on one recipe share its build: the first of them builds it, and the others
  wait until that gate has ended, while other gates take their place (gates.provenance.recipes
  would make a second one wait on the build's lock anyway, holding a worker idle: 70 s of a
  `gates check --all` in CI);
- a gate's output is held and printed whole when it ends, so runs side by side do not
  interleave their lines; the verdicts come back in the order the gates were given.

OpenMP threads of runs side by side sleep instead of spinning while they wait
(``OMP_WAIT_POLICY=PASSIVE`` where the caller set no policy): two torch processes on two
cores otherwise spin against each other for seconds per step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gates.runner import forkrun


@dataclass(frozen=True)
class Job:
    gate_id: str
    contract_path: Path
    #: Runs alone (it times the machine).
    timed: bool = False
    #: The command of the recipe whose artifact it builds or reads; empty: none. Such jobs
    #: start before the others, and jobs on one recipe share its build.
    recipe: tuple[str, ...] = ()

    @property
    def builds(self) -> bool:
        return bool(self.recipe)


@dataclass(frozen=True)
class Outcome:
    gate_id: str
    #: The evidence's verdict, or "refused (exit N)" when the run wrote none.
    verdict: str
    seconds: float
    output: str


def order(jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """(the timed jobs, in the order given; the others, builders first, else as given)."""
    timed = [j for j in jobs if j.timed]
    rest = [j for j in jobs if not j.timed]
    return timed, sorted(rest, key=lambda j: not j.builds)


def run_all(
    jobs: Sequence[Job],
    command: Callable[[Job, Path], list[str]],
    *,
    parallel: int,
    report: Callable[[Outcome], None],
    env: dict[str, str] | None = None,
) -> list[Outcome]:
    """Run ``command(job, evidence_path)`` for every job (see the module docstring); each
    outcome goes to ``report`` as it ends. Returns the outcomes in the order of ``jobs``."""
    if parallel < 1:
        raise ValueError(f"parallel must be at least 1, got {parallel}")
    base = dict(os.environ if env is None else env)
    side_by_side = dict(base)
    side_by_side.setdefault(forkrun.OMP_WAIT, "PASSIVE")
    timed, rest = order(jobs)
    done: dict[str, Outcome] = {}
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="shipgate-check-") as tmp:

        def run(job: Job, run_env: dict[str, str]) -> None:
            out = Path(tmp) / f"{job.gate_id}.json"
            outcome = _run_one(job, command(job, out), out, run_env)
            with lock:  # one report at a time: a gate's output stays in one piece
                done[job.gate_id] = outcome
                report(outcome)

        for job in timed:
            run(job, base)
        _side_by_side(rest, lambda job: run(job, side_by_side), parallel)
    return [done[job.gate_id] for job in jobs]


def _side_by_side(jobs: Sequence[Job], run: Callable[[Job], None], parallel: int) -> None:
    """``run`` each job, ``parallel`` at a time, in order, except that a job on a recipe
    whose first job is still running waits for it to end (the build is then in the cache)
    and the next job that can run goes instead."""
    first_on: dict[tuple[str, ...], str] = {}
    for job in jobs:
        if job.recipe:
            first_on.setdefault(job.recipe, job.gate_id)
    pending = list(jobs)
    ended: set[str] = set()
    changed = threading.Condition()

    def can_start(job: Job) -> bool:
        first = first_on.get(job.recipe)
        return first is None or first == job.gate_id or first in ended

    def take() -> Job | None:
        with changed:
            while pending:
                ready = next((job for job in pending if can_start(job)), None)
                if ready is not None:
                    pending.remove(ready)
                    return ready
                changed.wait()  # every pending job waits on a running first job
            return None

    def worker() -> None:
        while (job := take()) is not None:
            try:
                run(job)
            finally:
                with changed:
                    ended.add(job.gate_id)
                    changed.notify_all()

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        for future in [pool.submit(worker) for _ in range(min(parallel, len(jobs)))]:
            future.result()


def _run_one(job: Job, argv: list[str], evidence: Path, env: dict[str, str]) -> Outcome:
    started = time.perf_counter()
    proc = subprocess.run(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in the order it was written
        text=True,
        errors="replace",
        check=False,
    )
    seconds = time.perf_counter() - started
    verdict = f"refused (exit {proc.returncode})"
    if evidence.is_file():  # written whatever the verdict; absent when refused
        verdict = json.loads(evidence.read_text(encoding="utf-8"))["verdict"]
    return Outcome(job.gate_id, verdict, seconds, proc.stdout)


def gates_check_argv(job: Job, out: Path, root: Path | None) -> list[str]:
    """``python -m gates.cli.check_one GATE CONTRACT OUT [ROOT]``: `gates check GATE --files
    CONTRACT --out OUT [--root ROOT]` less the contract's validation, which the caller did."""
    argv = [sys.executable, "-m", "gates.cli.check_one", job.gate_id, str(job.contract_path)]
    return argv + [str(out)] + ([str(root)] if root else [])
