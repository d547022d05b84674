"""A checkpoint save, a retention prune and an export killed (SIGKILL) at every boundary
leave the old state or the new one, and the next command recovers (issue 20).

Crash-point enumeration (tests/crash_points.py, shared with tests/acceptance/
test_gates_crash.py): each operation first runs once in a forked child that records every
call that changes the disk - a create, write, fsync, chmod, mkdir, rename, replace, unlink,
rmdir or sendfile - and BOUNDARIES counts them. Then, for every k from 0 (killed as the
operation begins) to the last boundary, a fresh copy of the start is put through the
operation in a child that SIGKILLs itself right after boundary k. A checkpoint's tensor
files are written through ``os`` (trainer/checkpoint/durable.py: create, the header, then
the tensors' bytes), so a kill lands on an empty and a torn tensor file; safetensors'
``save_file`` (the export's weights) writes from Rust, out of the hooks' sight: in the
children the same bytes go through ``os`` (create, first half, rest) for the same reason.

- save (``save_checkpoint`` of step 15 beside steps 5 and 10): every step-NNNNNNNN
  directory is a complete checkpoint; the valid set is {5, 10} or {5, 10, 15};
  ``latest_valid`` picks the newest of it; ``latest`` names a valid one (the old until
  the pointer's rename: "published" is the new checkpoint beside the old pointer);
  leftovers are only a staging directory or the pointer's temp file, which no loader
  lists (the pointer's temp file is not cleaned up later: it stays, ignored). The next
  save (step 15 again when it was lost, else 20) and the prune ``Checkpointer.save`` runs
  after it succeed, leaving no staging directory and ``latest`` naming the new newest.
- prune (keep 2 of steps 5, 10, 15, with a crashed save's staging directory and a killed
  prune's ``.deleting`` left over): the valid set is {5, 10, 15} or {10, 15}, never a
  step directory missing a file; the next prune finishes, leaving no leftover.
- export (``export_checkpoint`` of step 10, with its tokenizer, to ``release``, absent or
  an empty directory): the --out directory is absent (or still empty) or byte for byte the
  export of an unkilled run, never a partial one; the next export writes it when absent
  and refuses, touching nothing, when present; either way no staging directory is left.

In every enumeration the state, once new, stays new for every later k, the last k is new,
and the unkilled run fsyncs every file after its last write before any rename (what a
power loss, unlike a kill, would show). Seeded defects - a save written in place, a
prune deleting in place, an export writing into --out, a save that skips an fsync - must
make the checks fail (the positive controls below).

The four full enumerations (83 crash points) are marked slow (about 25 s together on two
cores); the fast slice kills each operation at the boundaries around its commit point.

Run: .venv/bin/pytest tests/unit/trainer/test_checkpoint_crash_points.py  (-m "not slow")
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.crash_points import NEVER, durability_problems, run_crashing, safetensors_through_os
from tests.unit.trainer.checkpoint_support import save, state_at, trained
from tests.unit.trainer.loop_support import one_thread  # noqa: F401 - autouse fixture
from trainer.checkpoint import export as export_module
from trainer.checkpoint import retention
from trainer.checkpoint import save as save_module
from trainer.checkpoint.durable import write_json
from trainer.checkpoint.export import CONFIG_FILE, ExportError, export_checkpoint
from trainer.checkpoint.layout import (
    LATEST_POINTER,
    MODEL_FILE,
    checkpoint_dirs,
    step_dir_name,
)
from trainer.checkpoint.load import latest_valid
from trainer.checkpoint.save import save_checkpoint
from trainer.checkpoint.verify import inspect_checkpoint
from trainer.model import hf

#: Disk-changing calls of each operation, as the README states them: a change to an
#: operation's write sequence changes these, and the README with them.
BOUNDARIES = {"save": 32, "prune": 17, "export": 15, "export into an empty --out": 16}
#: What a crash may leave beside the checkpoints, never listed by a loader: a save's staging
#: directory, a prune's renamed victim, the ``latest`` pointer's temp file.
LEFTOVER = re.compile(r"^(step-\d{8}\.(tmp|deleting)|\.latest\.[^/]+\.tmp)$")
KEEP = 2
OUT = "release"
ROOT = "root"


def names(*steps: int) -> set[str]:
    return {step_dir_name(s) for s in steps}


def run_dir_state(run: Path, old: set[str], new: set[str], where: str) -> tuple[str, str]:
    """Check a run directory after a crash; return (which valid set, which pointer)."""
    dirs = checkpoint_dirs(run)
    for path in dirs:
        report = inspect_checkpoint(path)
        assert report.valid, f"{where}: {path.name} is not a complete checkpoint: {report.problems}"
    valid = {p.name for p in dirs}
    assert valid in (old, new), f"{where}: checkpoints {sorted(valid)}, neither old nor new"
    chosen, skipped = latest_valid(run)
    assert chosen == dirs[0] and not skipped, f"{where}: latest_valid chose {chosen}"
    pointer = (run / LATEST_POINTER).read_text().strip()
    assert pointer in valid, f"{where}: latest names {pointer!r}, not a valid checkpoint"
    stray = sorted(p.name for p in run.iterdir() if p not in dirs and p.name != LATEST_POINTER)
    assert all(LEFTOVER.match(n) for n in stray), f"{where}: unexpected leftovers {stray}"
    return ("new" if valid == new else "old"), pointer


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file under ``root`` by its bytes, every directory as None."""
    return {
        str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


@dataclass
class Operation:
    """One operation under attack: its start, how to run it in a child on a copy, how to
    read the state a crash left (``"old"``, ``"new"``, or an intermediate name, in the order
    of ``order``), and the next command (which must succeed)."""

    name: str
    start: Callable[[Path], None]
    op: Callable[[Path], Callable[[], object]]
    state: Callable[[Path, Path, str], str]  # (copy, control copy, where)
    recover: Callable[[Path, Path, str, str], None]  # (copy, control copy, state, where)
    order: tuple[str, ...] = ("old", "new")


@pytest.fixture
def operations(tmp_path) -> dict[str, Operation]:
    model, optimizer = trained(steps=1)
    tokenizer = tmp_path / "tokenizer"
    make_tokenizer(tokenizer, model.config.vocab_size)

    def saved(run: Path, step: int) -> Path:
        return save_checkpoint(
            run, step=step, model=model, optimizer=optimizer, state=state_at(step)
        )

    # save: step 15 beside 5 and 10.
    def save_start(run: Path) -> None:
        for step in (5, 10):
            save(run, step, model, optimizer)

    def save_state(run: Path, control: Path, where: str) -> str:
        valid, pointer = run_dir_state(run, names(5, 10), names(5, 10, 15), where)
        if valid == "old":
            assert pointer == step_dir_name(10), f"{where}: latest names {pointer}"
            return "old"
        return "new" if pointer == step_dir_name(15) else "published"

    def save_recover(run: Path, control: Path, state: str, where: str) -> None:
        # What a resumed run does: save the step after the newest valid checkpoint, then
        # prune (Checkpointer.save).
        step = 15 if state == "old" else 20
        saved(run, step)
        retention.prune(run, KEEP)
        after = {p.name for p in run.iterdir() if not LEFTOVER.match(p.name)}
        assert after == names(step - 5, step) | {LATEST_POINTER}, f"{where}: then {after}"
        ignored = [p.name for p in run.iterdir() if LEFTOVER.match(p.name)]
        assert all(n.startswith(f".{LATEST_POINTER}.") for n in ignored), f"{where}: {ignored}"
        assert (run / LATEST_POINTER).read_text() == step_dir_name(step) + "\n", where
        assert latest_valid(run)[0] == run / step_dir_name(step), where

    # prune: keep 2 of 5, 10, 15, with leftovers of a crashed save and a killed prune.
    def prune_start(run: Path) -> None:
        for step in (5, 10, 15):
            save(run, step, model, optimizer)
        staging = run / (step_dir_name(20) + save_module.STAGING_SUFFIX)
        staging.mkdir()
        (staging / MODEL_FILE).write_bytes((run / step_dir_name(15) / MODEL_FILE).read_bytes()[:99])
        deleting = run / (step_dir_name(3) + retention.DELETING_SUFFIX)
        shutil.copytree(run / step_dir_name(5), deleting)
        (deleting / MODEL_FILE).unlink()

    def prune_state(run: Path, control: Path, where: str) -> str:
        valid, pointer = run_dir_state(run, names(5, 10, 15), names(10, 15), where)
        assert pointer == step_dir_name(15), f"{where}: latest names {pointer}"
        return valid

    def prune_recover(run: Path, control: Path, state: str, where: str) -> None:
        retention.prune(run, KEEP)
        assert tree(run) == tree(control), f"{where}: the next prune left {sorted(tree(run))}"

    # export: step 10 and its tokenizer to `release`.
    def export_start(root: Path) -> None:
        save(root / "run", 10, model, optimizer, tokenizer_dir=str(tokenizer))

    def export_op(root: Path) -> Callable[[], object]:
        return lambda: export_checkpoint(root / "run" / step_dir_name(10), root / OUT)

    def export_state(root: Path, control: Path, where: str) -> str:
        assert inspect_checkpoint(root / "run" / step_dir_name(10)).valid, where
        stray = sorted(p.name for p in root.iterdir() if p.name not in ("run", OUT))
        assert stray in ([], [f".{OUT}.export-tmp"]), f"{where}: leftovers {stray}"
        out = root / OUT
        if not out.exists() or (out.is_dir() and not any(out.iterdir())):
            return "old"  # no export yet: nothing there, or the empty directory it had
        assert tree(root / OUT) == tree(control / OUT), (
            f"{where}: {OUT}/ holds {sorted(tree(root / OUT))}, not the complete export"
        )
        return "new"

    def export_recover(root: Path, control: Path, state: str, where: str) -> None:
        if state == "new":  # the next export refuses to overwrite and touches nothing
            with pytest.raises(ExportError, match="exists and is not an empty directory"):
                export_op(root)()
        else:
            export_op(root)()
        assert tree(root) == tree(control), f"{where}: the next export left {sorted(tree(root))}"

    return {
        "save": Operation(
            "save",
            save_start,
            lambda run: lambda: saved(run, 15),
            save_state,
            save_recover,
            ("old", "published", "new"),
        ),
        "prune": Operation(
            "prune",
            prune_start,
            lambda run: lambda: retention.prune(run, KEEP),
            prune_state,
            prune_recover,
        ),
        "export": Operation("export", export_start, export_op, export_state, export_recover),
        "export into an empty --out": Operation(
            "export into an empty --out",
            lambda root: (export_start(root), (root / OUT).mkdir()),
            export_op,
            export_state,
            export_recover,
        ),
    }


def make_tokenizer(path: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path.mkdir()
    tok.save(str(path / "tokenizer.json"))


def enumerate_crashes(
    operation: Operation,
    work: Path,
    *,
    only: Callable[[list[str]], list[int]] | None = None,
    defect: Callable[[], None] | None = None,
) -> dict[str, list[str]]:
    """Kill ``operation`` at every boundary (or the crash points ``only`` picks from the
    boundaries' labels), check each crash's state and the next command. ``defect``: patched
    into every child after the safetensors stand-in (the positive controls)."""

    def setup() -> None:
        safetensors_through_os()
        if defect is not None:
            defect()

    # Every copy is named ROOT (in a folder of its own): a label names a directory fsynced.
    start = work / "start" / ROOT
    start.mkdir(parents=True)
    operation.start(start)
    control = work / "control" / ROOT
    shutil.copytree(start, control)
    status, labels = run_crashing(operation.op(control), control, NEVER, setup=setup)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, labels
    assert labels, "no boundary was seen: the harness no longer sees the operation's writes"
    assert operation.state(control, control, "the unkilled run") == "new"
    problems = durability_problems(labels)
    assert not problems, "a power loss could lose a published file:\n" + "\n".join(problems)

    states: list[str] = []
    points = list(range(len(labels) + 1)) if only is None else only(labels)
    for k in points:
        crashed = work / f"k{k}" / ROOT
        shutil.copytree(start, crashed)
        status, passed = run_crashing(operation.op(crashed), crashed, k, setup=setup)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (k, passed)
        assert passed == labels[:k], f"the operation took another path at crash point {k}"
        where = f"{operation.name} killed at crash point {k} ({labels[k - 1] if k else 'start'})"
        state = operation.state(crashed, control, where)
        operation.recover(crashed, control, state, where)
        states.append(state)
        shutil.rmtree(crashed.parent)
    ranks = [operation.order.index(s) for s in states]
    assert ranks == sorted(ranks), f"{operation.name}: a state went back: {states}"
    if only is None:
        assert states[0] == "old", "killed before its first boundary, nothing had changed"
        assert states[-1] == "new", "killed after its last boundary, the operation had finished"
    return {"boundaries": labels, "states": states}


def boundary_counts(seen: dict[str, list[str]], name: str, minimum: int) -> None:
    labels = seen["boundaries"]
    print(f"{name}: {len(labels)} boundaries, {len(labels) + 1} crash points: {labels}")
    assert len(labels) >= minimum, labels
    assert len(labels) == BOUNDARIES[name], labels


# The fast slice: each operation killed around its commit point.


def around(*needles: str) -> Callable[[list[str]], list[int]]:
    """The crash points just before and just after the first boundary matching each needle."""

    def pick(labels: list[str]) -> list[int]:
        points = []
        for needle in needles:
            at = next(i for i, entry in enumerate(labels) if re.fullmatch(needle, entry))
            points += [at, at + 1]
        return points

    return pick


def test_a_save_killed_around_its_rename_and_pointer_update_is_old_or_new(operations, tmp_path):
    pick = around(r"fsync manifest\.json", r"rename step-\d{8}\.tmp", r"replace \.latest\..*")
    seen = enumerate_crashes(operations["save"], tmp_path, only=pick)
    assert seen["states"] == ["old", "old", "old", "published", "published", "new"]


def test_a_prune_killed_around_its_rename_and_mid_deletion_is_old_or_new(operations, tmp_path):
    pick = around(r"rename step-00000005", r"unlink manifest\.json")
    seen = enumerate_crashes(operations["prune"], tmp_path, only=pick)
    assert seen["states"] == ["old", "new", "new", "new"]


def test_an_export_killed_around_its_rename_is_absent_or_complete(operations, tmp_path):
    seen = enumerate_crashes(operations["export"], tmp_path, only=around(r"rename \.release.*"))
    assert seen["states"] == ["old", "new"]


# The full enumerations.


@pytest.mark.slow
def test_a_save_killed_at_any_boundary_leaves_old_or_new_and_the_next_save_recovers(
    operations, tmp_path
):
    boundary_counts(enumerate_crashes(operations["save"], tmp_path), "save", 30)


@pytest.mark.slow
def test_a_prune_killed_at_any_boundary_leaves_old_or_new_and_the_next_prune_recovers(
    operations, tmp_path
):
    boundary_counts(enumerate_crashes(operations["prune"], tmp_path), "prune", 15)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["export", "export into an empty --out"])
def test_an_export_killed_at_any_boundary_leaves_out_absent_or_complete(operations, tmp_path, name):
    boundary_counts(enumerate_crashes(operations[name], tmp_path), name, 12)


# Positive controls: a seeded defect the enumeration must catch.


def test_a_save_written_in_place_is_caught(operations, tmp_path):
    def in_place() -> None:
        save_module._staging_dir = lambda final: final

    with pytest.raises(AssertionError, match="is not a complete checkpoint"):
        enumerate_crashes(operations["save"], tmp_path, defect=in_place)


def test_a_prune_deleting_in_place_is_caught(operations, tmp_path):
    def in_place() -> None:
        def prune(run_dir: Path, keep: int) -> list[Path]:
            doomed = checkpoint_dirs(run_dir)[keep:]
            for path in doomed:
                shutil.rmtree(path)
            for leftover in run_dir.glob("step-*.*"):
                shutil.rmtree(leftover)
            return doomed

        retention.prune = prune

    with pytest.raises(AssertionError, match="is not a complete checkpoint"):
        enumerate_crashes(operations["prune"], tmp_path, defect=in_place)


def test_an_export_writing_into_out_is_caught(operations, tmp_path):
    def in_place() -> None:
        def export_model(model, out_dir, *, tokenizer_dir=None):
            out_dir.mkdir()
            tensors = hf._tensors_for_file(model)
            export_module.save_file(tensors, str(out_dir / MODEL_FILE), metadata={"format": "pt"})
            write_json(out_dir / CONFIG_FILE, hf.hf_config_dict(model.config, dtype="float32"))
            shutil.copyfile(Path(tokenizer_dir) / "tokenizer.json", out_dir / "tokenizer.json")

        export_module.export_model = export_model

    with pytest.raises(AssertionError, match="not the complete export"):
        enumerate_crashes(operations["export"], tmp_path, defect=in_place)


def test_a_save_that_renames_an_unsynced_file_is_caught(operations, tmp_path):
    def no_fsync() -> None:
        save_module.fsync_file = lambda path: None

    with pytest.raises(AssertionError, match=r"optimizer\.safetensors unsynced"):
        enumerate_crashes(operations["save"], tmp_path, only=lambda labels: [], defect=no_fsync)


def test_the_safetensors_stand_in_writes_the_bytes_save_file_writes(tmp_path):
    model, _ = trained(steps=1)
    from safetensors.torch import save_file  # noqa: PLC0415

    tensors = hf._tensors_for_file(model)
    save_file(tensors, str(tmp_path / "real"), metadata={"format": "pt"})

    def op() -> None:
        import safetensors.torch  # noqa: PLC0415

        safetensors.torch.save_file(tensors, str(tmp_path / "os"), metadata={"format": "pt"})

    status, labels = run_crashing(op, tmp_path, NEVER, setup=safetensors_through_os)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert labels == ["open os", "write os", "write os"]
    assert (tmp_path / "os").read_bytes() == (tmp_path / "real").read_bytes()
