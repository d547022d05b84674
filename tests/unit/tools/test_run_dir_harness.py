"""tools/run_dir_harness.py: its checker calls corrupt what two unlocked writers leave (a
step written twice, a run that could not save, another run's id in the store, a writer's
traceback, nobody writing) and clean what one writer leaves; and the harness itself, run
for one pairing of each kind, finds every pairing clean with the writer lock in place.

Without the lock (flock replaced by nothing), 8 pairings gave 2 corrupt: steps 49..60
twice in metrics.jsonl with a save_failed, and an export of a checkpoint retention had
just deleted - the failures issue 31 reported."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tools import run_dir_harness as harness

REFERENCE = [6.0 - 0.1 * i for i in range(harness.LONGER)]


def fake_run(run: Path, steps: list[int], *, status: str = "finished", ids=("r1",)) -> Path:
    """What `trainer apply` leaves, by hand: metrics, state, manifest and store."""
    run.mkdir(parents=True)
    lines = [json.dumps({"step": s, "loss": REFERENCE[s - 1]}) for s in steps]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (run / "training_state.json").write_text(
        json.dumps({"status": status, "last": {"step": steps[-1]}})
    )
    (run / "run_manifest.json").write_text(json.dumps({"run_id": "r1"}))
    db = sqlite3.connect(run / "runs.db")
    db.execute("CREATE TABLE runs (run_id TEXT)")
    db.executemany("INSERT INTO runs VALUES (?)", [(i,) for i in ids])
    db.commit()
    db.close()
    return run


def setup_stub(tmp_path: Path) -> harness.Setup:
    return harness.Setup(
        scratch=tmp_path,
        corpus=tmp_path,
        config=tmp_path / "run.yaml",
        reference_losses={"apply": REFERENCE, "pipeline": REFERENCE},
        half_run=tmp_path,
        finished=tmp_path,
        reference_export={},
        alone_s={},
    )


def writer(returncode: int, stderr: str = "") -> harness.Writer:
    return harness.Writer(["trainer"], returncode=returncode, stderr=stderr)


REFUSED = writer(1, f"trainer apply: error: run: {harness.LOCKED}: pid 12 (trainer apply)")
ALL_STEPS = list(range(1, harness.STEPS + 1))


def test_what_one_writer_leaves_is_clean(tmp_path):
    run = fake_run(tmp_path / "run", ALL_STEPS)
    assert harness.check("apply x apply", [writer(0), REFUSED], setup_stub(tmp_path), run) == []


#: case -> (metrics steps, end status, run ids in the store, the writers, what is said)
CORRUPTIONS = {
    "a step twice": ([*ALL_STEPS[:50], 50, *ALL_STEPS[50:]], "finished", ("r1",), "ok",
                     "metrics.jsonl steps"),
    "a lost step": (ALL_STEPS[:-2] + ALL_STEPS[-1:], "finished", ("r1",), "ok",
                    "metrics.jsonl steps"),
    "not finished": (ALL_STEPS, "save_failed", ("r1",), "ok", "training_state.json says"),
    "another run's id": (ALL_STEPS, "finished", ("r1", "r2"), "ok", "runs.db holds"),
    "a traceback": (ALL_STEPS, "finished", ("r1",), "traceback", "without a clean refusal"),
    "nobody wrote": (ALL_STEPS, "finished", ("r1",), "refused", "both writers were refused"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_what_two_unlocked_writers_leave_is_corrupt(tmp_path, case):
    steps, status, ids, writers, found = CORRUPTIONS[case]
    run = fake_run(tmp_path / "run", steps, status=status, ids=ids)
    pair = {
        "ok": [writer(0), REFUSED],
        "traceback": [writer(0), writer(1, "Traceback (most recent call last):\n  ...")],
        "refused": [REFUSED, REFUSED],
    }[writers]
    problems = harness.check("apply x apply", pair, setup_stub(tmp_path), run)
    assert any(found in p for p in problems), (case, problems)


def test_changed_losses_are_corrupt_even_with_every_step_once(tmp_path):
    run = fake_run(tmp_path / "run", ALL_STEPS)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[7] = json.dumps({"step": 8, "loss": 1.0})
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    problems = harness.check("apply x apply", [writer(0), REFUSED], setup_stub(tmp_path), run)
    assert problems == ["metrics.jsonl losses differ from the reference run's"]


EXPORT = harness.trainer("export", "/r/checkpoints/step-00000060", "--out", "/r/export")


def _export_writer(stderr: str) -> harness.Writer:
    pruned = harness._pruned("apply x export", EXPORT)
    return harness.Writer(EXPORT, returncode=1, stderr=stderr, also_refused=pruned)


def test_an_export_of_a_checkpoint_pruned_before_it_took_the_lock_is_a_clean_refusal(tmp_path):
    # Writer A took the lock first, extended the run to step 90 and pruned step 60, then let
    # go; only then did the export ask for the lock: sequential, nothing interleaved.
    run = fake_run(tmp_path / "run", list(range(1, harness.LONGER + 1)))
    said = "/r/checkpoints/step-00000060: invalid checkpoint:\n  /r/checkpoints/step-00000060"
    gone = _export_writer(f"trainer export: error: {said}: not a directory\n")
    stub = setup_stub(tmp_path)
    assert harness.check("apply x export", [writer(0), gone], stub, run) == []
    (run / "export").mkdir()  # but nothing may be left of it
    assert harness.check("apply x export", [writer(0), gone], stub, run) == [
        "a refused export left export/ behind"
    ]


def test_not_a_directory_is_no_refusal_for_any_other_writer_or_checkpoint():
    other = "/r/checkpoints/step-00000063: not a directory"  # a checkpoint it was not given
    assert _export_writer(other).verdict() == "bad"
    assert _export_writer("Traceback (most recent call last):\n" + other[:-3]).verdict() == "bad"
    resume = harness.trainer("apply", "run.yaml", "--resume", "latest")
    assert harness._pruned("resume x resume", resume) is None
    assert harness._pruned("apply x export", resume) is None


@pytest.mark.parametrize(("writer_a_s", "overlapped"), [(0.0, False), (3.0, True)])
def test_a_pairing_whose_first_writer_ended_before_the_second_is_set_aside(
    tmp_path, monkeypatch, writer_a_s, overlapped
):
    # Under load the setup's timing overstates a writer's time, and the second writer may
    # be due after the first ended: that pairing judges nothing side by side.
    sleep = [harness.sys.executable, "-c", f"import time; time.sleep({writer_a_s})"]
    monkeypatch.setattr(harness, "_writers", lambda kind, s, target: [sleep, [*sleep[:2], "0"]])
    monkeypatch.setattr(harness, "check", lambda kind, writers, s, target: [])
    pairing = harness.run_pairing("apply x apply", 1.0, setup_stub(tmp_path), tmp_path / "t")
    assert (pairing is not None) == overlapped


@pytest.mark.slow
def test_one_pairing_of_each_kind_leaves_the_run_directory_clean(tmp_path):
    """The harness end to end (about 70 s): setup, then apply x apply, resume x resume,
    pipeline x pipeline and apply x export at seeded offsets."""
    result = harness.harness(len(harness.KINDS), seed=5, scratch=tmp_path)
    assert result["kinds"] == dict.fromkeys(harness.KINDS, 1)
    assert result["corrupt"] == 0, [p for p in result["pairings"] if not p["clean"]]
