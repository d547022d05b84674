"""Two writers at once (issue 31): `gates promote` and `gates audit` on one project, the second
started at a seeded offset, never leave a half-written or mixed state.

Each pairing runs on a fresh copy of the widget project (tests/acceptance/widget_project.py).
Both commands run as real `gates` processes through a small driver that holds the
promotion's commit in its *prepared* state (the journal and the first temp file written, the
commit point not reached) for HOLD_S seconds, so that a second command started "during the
commit" really is: the window a racing recovery could roll back under a promotion's feet.
The second command starts OFFSETS after an anchor: the first's start, or the moment the
first's commit is prepared. Offsets come from a seeded generator: the same list every run.

After both end, every file of the project is checked:

- each command exited 0, or (the second only) refused cleanly, naming the lock it waited for;
- the contract is byte for byte the one an uncontended promotion writes (or untouched, if the
  promotion refused), and the gate's evidence is a whole record that agrees with it;
- the audit evidence is a whole, schema-valid audit with the real code passing and the mutant
  killed (or absent, if the audit refused);
- every other file is untouched; no journal, temp file or build directory is left;
- `pv validate` passes: the contract, the evidence and the audit agree with each other.

`gates audit` writes only its --out file, which no promotion writes, and it takes the lock
only to recover an interrupted commit (gates.promotion.recover_before_reading): holding it
for a whole audit would stall every promotion for minutes. What the lock must cover is that
recovery, and the prepared-commit pairing is the one that shows it.

Run: .venv/bin/pytest tests/acceptance/test_gates_concurrency.py  (the offset pairings: slow)
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gates.cli import pv as pv_cli
from gates.io import atomic
from gates.provenance import audit_record, evidence
from tests.acceptance import widget_project

GATE = "GATE-WIDGET-001"
CONTRACT = Path("contracts") / "widget-v1.yaml"
EVIDENCE = Path("evidence") / "C-WIDGET" / f"{GATE}.json"
AUDIT = Path("evidence") / "audit" / "audit.json"
PROMOTE = ["promote", GATE, "--artifact", "artifact.txt"]
AUDIT_ARGS = ["audit", "--quiet", "--out", str(AUDIT)]
#: How long the promotion's commit stays prepared: longer than a `gates` process takes to
#: start and reach its recovery, on a slow machine too.
HOLD_S = 3.0
DEADLINE_S = 180

DRIVER = """\
import os, sys, time
from pathlib import Path

from gates.io import files
from gates.cli import gates

marker, hold = Path(sys.argv[1]), float(sys.argv[2])
real_write_new = files.write_new


def held(path, data, like):
    # gates.io.atomic.commit writes each temp file with write_new: after the first, the commit
    # is prepared; say so and hold it there.
    real_write_new(path, data, like)
    if str(path).endswith(files.TEMP_SUFFIX) and not marker.exists():
        marker.write_text(str(os.getpid()))
        time.sleep(hold)


files.write_new = held
sys.exit(gates.main(sys.argv[3:]))
"""

rng = random.Random(31)
#: (first, second, anchor, offset in seconds after the anchor)
PAIRINGS: list[tuple[str, str, str, float]] = [
    *[("promote", "audit", "start", round(rng.uniform(0.0, 3.0), 2)) for _ in range(2)],
    *[("audit", "promote", "start", round(rng.uniform(0.0, 3.0), 2)) for _ in range(2)],
]
COMMANDS = {"promote": PROMOTE, "audit": AUDIT_ARGS}


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not {".git", "__pycache__"} & set(p.relative_to(root).parts)
        and p.name != atomic.LOCK_NAME
    }


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The widget project and its artifact, committed."""
    root = tmp_path_factory.mktemp("concurrency") / "pristine" / "widget"
    root.mkdir(parents=True)
    widget_project.build(root)
    widget_project.use_measurement_dir(root, widget_project.MEASUREMENT)  # as the CLI finds it
    (root / "artifact.txt").write_text("".join(f"line {i}\n" for i in range(5)))
    widget_project.git(root, "add", "-A")
    widget_project.git(root, "-c", "user.name=t", "-c", "user.email=t@t.invalid",
                       "commit", "-qm", "artifact")  # fmt: skip
    (root.parents[1] / "driver.py").write_text(DRIVER)
    return root


def _start(root: Path, command: str, marker: Path) -> subprocess.Popen:
    driver = root.parents[1] / "driver.py"
    argv = [sys.executable, str(driver), str(marker), str(HOLD_S), *COMMANDS[command]]
    return subprocess.Popen(
        argv, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _copy(pristine: Path, name: str) -> Path:
    root = pristine.parents[1] / name / "widget"
    shutil.copytree(pristine, root, symlinks=True)
    return root


@pytest.fixture(scope="module")
def uncontended(pristine: Path) -> bytes:
    """The contract a promotion writes with nothing else running (same day, same copy)."""
    root = _copy(pristine, "control")
    marker = root.parent / "prepared"
    marker.write_text("")  # as if held already: this one is not held
    proc = _start(root, "promote", marker)
    out, err = proc.communicate(timeout=DEADLINE_S)
    assert proc.returncode == 0, out + err
    return (root / CONTRACT).read_bytes()


Pairing = tuple[str, str, str, float]


def _race(pristine: Path, name: str, pairing: Pairing) -> tuple[Path, dict]:
    """Run the pairing on a fresh copy; return the copy and each command's (exit, stderr)."""
    first, second, anchor, offset = pairing
    root = _copy(pristine, name)
    marker = root.parent / "prepared"
    one = _start(root, first, marker)
    if anchor == "prepared":
        deadline = time.monotonic() + DEADLINE_S
        while not marker.exists() and one.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert marker.exists(), "the first command never reached its commit"
    time.sleep(offset)
    two = _start(root, second, marker)
    done = {}
    for command, proc in ((first, one), (second, two)):
        _, err = proc.communicate(timeout=DEADLINE_S)
        done[command] = (proc.returncode, err)
    return root, done


def _check(root: Path, pristine: Path, done: dict, second: str, contract: bytes) -> None:
    for command, (code, err) in done.items():
        assert "Traceback" not in err and "internal error" not in err, (command, err)
        refused = command == second and code in (1, 2) and atomic.LOCK_NAME in err
        assert code == 0 or refused, (command, code, err)
    after, expected = _files(root), _files(pristine)
    if done["promote"][0] == 0:
        assert after.pop(str(CONTRACT)) == contract, "not the uncontended promotion's contract"
        del expected[str(CONTRACT)]
        record = evidence.load(root / EVIDENCE)  # whole and schema-valid, or EvidenceError
        assert (record["verdict"], record["contract"]["version"]) == ("PASS", "1.1.0")
        del after[str(EVIDENCE)]
    if done["audit"][0] == 0:
        record = audit_record.load_record(root / AUDIT)  # whole and schema-valid
        runs = [(r["mutant"], r["verdict"]) for r in record["rows"]]
        assert runs == [(None, "passes"), ("count-off-by-one", "killed")] and record["ok"]
        del after[str(AUDIT)]
    # What a command that refused would have written is as it was (absent, or the old
    # contract); everything else is untouched.
    assert after == expected, sorted(set(after.items()) ^ set(expected.items()))
    assert not (root / atomic.JOURNAL_NAME).exists()
    leftovers = [p for p in root.rglob("*") if p.name.endswith(".tmp") and ".git" not in p.parts]
    assert leftovers == []
    cwd = Path.cwd()
    os.chdir(root)
    try:
        assert pv_cli.main(["validate", str(CONTRACT)]) == 0, "contract, evidence, audit disagree"
    finally:
        os.chdir(cwd)


@pytest.mark.slow
def test_an_audit_started_while_a_promotion_is_committing_waits_and_both_finish(
    pristine: Path, uncontended: bytes
):
    """The audit starts while the promotion's commit is prepared: the audit's recovery must
    wait for the lock, not roll back the commit under the promotion's feet."""
    offset = round(random.Random(31).uniform(0.0, 0.3), 2)
    root, done = _race(pristine, "prepared", ("promote", "audit", "prepared", offset))
    _check(root, pristine, done, "audit", uncontended)
    assert done["promote"][0] == 0 and done["audit"][0] == 0, done


@pytest.mark.slow
@pytest.mark.parametrize("pairing", PAIRINGS, ids=["-".join(map(str, p)) for p in PAIRINGS])
def test_a_promotion_and_an_audit_at_seeded_offsets_leave_each_file_whole(
    pristine: Path, uncontended: bytes, pairing: Pairing
):
    root, done = _race(pristine, "-".join(map(str, pairing)), pairing)
    _check(root, pristine, done, pairing[1], uncontended)
