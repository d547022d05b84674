"""gates.runner.checkrun: gates re-measured side by side, a timed gate alone, verdicts in the order
given, each gate's output whole. The "gate" here is a small python child that records when
it ran and writes its verdict where `gates check --out` would."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from gates.runner import checkrun

CHILD = textwrap.dedent("""\
    import json, os, sys, time
    gate, out, log, seconds, verdict = sys.argv[1:6]
    started = time.time()
    print(f"{gate} line 1", flush=True)
    time.sleep(float(seconds))
    print(f"{gate} line 2 OMP={os.environ.get('OMP_WAIT_POLICY', '-')}", flush=True)
    if verdict != "none":
        with open(out, "w") as fh:
            json.dump({"verdict": verdict}, fh)
    with open(log, "a") as fh:
        fh.write(json.dumps([gate, started, time.time()]) + "\\n")
    """)


def _command(tmp_path: Path, seconds: dict[str, float], verdicts: dict[str, str]):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    log = tmp_path / "ran.jsonl"

    def command(job: checkrun.Job, out: Path) -> list[str]:
        gate = job.gate_id
        return [sys.executable, str(script), gate, str(out), str(log),
                str(seconds.get(gate, 0.4)), verdicts.get(gate, "PASS")]  # fmt: skip

    return command, log


def _intervals(log: Path) -> dict[str, tuple[float, float]]:
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return {gate: (start, end) for gate, start, end in rows}


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_a_timed_gate_runs_alone_and_the_others_side_by_side(tmp_path):
    command, log = _command(tmp_path, {}, {})
    jobs = [
        checkrun.Job("G-A", Path("c.yaml")),
        checkrun.Job("G-TIMED", Path("c.yaml"), timed=True),
        checkrun.Job("G-B", Path("c.yaml")),
        checkrun.Job("G-C", Path("c.yaml")),
    ]
    reported = []
    outcomes = checkrun.run_all(jobs, command, parallel=2, report=reported.append)
    ran = _intervals(log)
    timed = ran["G-TIMED"]
    others = [ran[g] for g in ("G-A", "G-B", "G-C")]
    assert not any(_overlap(timed, other) for other in others), ran
    assert any(_overlap(a, b) for i, a in enumerate(others) for b in others[i + 1 :]), (
        "two untimed gates never ran at the same time with parallel=2"
    )
    assert [o.gate_id for o in outcomes] == ["G-A", "G-TIMED", "G-B", "G-C"]
    assert reported[0].gate_id == "G-TIMED", "the timed gate runs first, on a quiet machine"
    assert all(o.verdict == "PASS" for o in outcomes)


def test_with_one_job_nothing_overlaps(tmp_path):
    command, log = _command(tmp_path, {}, {})
    jobs = [checkrun.Job(g, Path("c.yaml")) for g in ("G-A", "G-B", "G-C")]
    checkrun.run_all(jobs, command, parallel=1, report=lambda o: None)
    ran = list(_intervals(log).values())
    assert not any(_overlap(a, b) for i, a in enumerate(ran) for b in ran[i + 1 :]), ran


def test_verdicts_output_and_refusals_come_back_per_gate(tmp_path):
    command, _ = _command(tmp_path, {"G-A": 0.6, "G-B": 0.1}, {"G-B": "FAIL", "G-C": "none"})
    jobs = [checkrun.Job(g, Path("c.yaml")) for g in ("G-A", "G-B", "G-C")]
    reported = []
    outcomes = checkrun.run_all(jobs, command, parallel=3, report=reported.append)
    by_gate = {o.gate_id: o for o in outcomes}
    assert by_gate["G-A"].verdict == "PASS"
    assert by_gate["G-B"].verdict == "FAIL"
    assert by_gate["G-C"].verdict == "refused (exit 0)", "no evidence written: refused"
    for gate, outcome in by_gate.items():
        assert outcome.output.splitlines()[:2] == [
            f"{gate} line 1",
            f"{gate} line 2 OMP=PASSIVE",
        ], "a gate's output is its own, whole, in order"
    assert [o.gate_id for o in reported][-1] == "G-A", "reported as each one ends"
    assert by_gate["G-A"].seconds >= 0.6


def test_a_timed_gate_keeps_the_callers_environment(tmp_path):
    command, _ = _command(tmp_path, {}, {})
    jobs = [checkrun.Job("G-T", Path("c.yaml"), timed=True), checkrun.Job("G-A", Path("c.yaml"))]
    env = {"PATH": "/usr/bin:/bin"}
    outcomes = checkrun.run_all(jobs, command, parallel=2, report=lambda o: None,
                                env=env)  # fmt: skip
    said = {o.gate_id: o.output.splitlines()[1] for o in outcomes}
    assert said == {"G-T": "G-T line 2 OMP=-", "G-A": "G-A line 2 OMP=PASSIVE"}
    chosen = checkrun.run_all(jobs[1:], command, parallel=2, report=lambda o: None,
                              env=env | {"OMP_WAIT_POLICY": "ACTIVE"})  # fmt: skip
    assert chosen[0].output.splitlines()[1].endswith("OMP=ACTIVE"), "the caller's policy stands"


def test_builders_start_before_the_rest_and_timed_ones_first():
    jobs = [
        checkrun.Job("A", Path("c")),
        checkrun.Job("B", Path("c"), recipe=("python", "make_b.py")),
        checkrun.Job("T", Path("c"), timed=True),
        checkrun.Job("C", Path("c"), recipe=("python", "make_c.py")),
    ]
    timed, rest = checkrun.order(jobs)
    assert [j.gate_id for j in timed] == ["T"]
    assert [j.gate_id for j in rest] == ["B", "C", "A"]


def test_gates_on_one_recipe_wait_for_the_first_while_other_gates_run(tmp_path):
    """The first gate on a recipe builds its artifact; another gate on it starts once that
    one has ended (it then reads the build from the cache), not beside it waiting on the
    build's lock with a worker idle: a gate on no recipe takes the free worker meanwhile."""
    recipe = ("python", "make_artifact.py", "--out", "{out}")
    command, log = _command(tmp_path, {"G-BUILDS": 1.2}, {})
    jobs = [
        checkrun.Job("G-BUILDS", Path("c.yaml"), recipe=recipe),
        checkrun.Job("G-READS", Path("c.yaml"), recipe=recipe),
        checkrun.Job("G-OTHER-RECIPE", Path("c.yaml"), recipe=("python", "other.py")),
        checkrun.Job("G-A", Path("c.yaml")),
        checkrun.Job("G-B", Path("c.yaml")),
    ]
    outcomes = checkrun.run_all(jobs, command, parallel=2, report=lambda o: None)
    ran = _intervals(log)
    assert ran["G-READS"][0] >= ran["G-BUILDS"][1], ran
    beside = [g for g in ("G-OTHER-RECIPE", "G-A", "G-B") if _overlap(ran[g], ran["G-BUILDS"])]
    assert beside, f"nothing ran beside the build: {ran}"
    assert [o.verdict for o in outcomes] == ["PASS"] * 5


def test_parallel_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        checkrun.run_all([], lambda job, out: [], parallel=0, report=lambda o: None)


def test_this_projects_gates_that_time_the_machine_run_alone():
    """GATE-BPE-TRAIN-PERF-003 (wall and RSS against HF) and -005 (wall against the
    reference) are ratios of timings side by side: another gate beside them skews both."""
    from gates import measure  # noqa: PLC0415
    from gates.model import project  # noqa: PLC0415
    from gates.pv.validate import find_root  # noqa: PLC0415

    root = find_root(Path(__file__))
    project.import_all(root, "measurements")  # every gate's measurer (a lookup imports one)
    timed = sorted(gate for gate, m in measure.REGISTRY.items() if m.timed)
    assert timed == ["GATE-BPE-TRAIN-PERF-003", "GATE-BPE-TRAIN-PERF-005"]
