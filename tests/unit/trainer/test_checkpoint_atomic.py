"""FALSIFY-TRAIN-LOOP-013: a crash at any point of a save never leaves a checkpoint the
loader accepts partially; corrupt checkpoints are refused naming the file and the reason.

The writer is "killed" at every boundary (after each data file, after the manifest,
before and after the rename) by an exception that no cleanup catches (a BaseException),
which leaves the disk as a SIGKILL at that point would.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest

from tests.unit.trainer.checkpoint_support import TINY, fresh, save, trained
from trainer.checkpoint import save as save_module
from trainer.checkpoint.layout import MANIFEST_FILE, CheckpointError, step_dir_name
from trainer.checkpoint.load import latest_valid, load_checkpoint
from trainer.checkpoint.verify import inspect_checkpoint, verify_checkpoint


class _Killed(BaseException):
    """The writer process dies here."""


BOUNDARIES = [
    "wrote model.safetensors",
    "wrote optimizer.safetensors",
    "wrote rng.safetensors",
    "wrote rng.json",
    "wrote state.json",
    "wrote manifest.json",
    "before rename",
    "after rename",
]


@pytest.mark.ship_blocking
def test_a_kill_at_any_boundary_of_a_save_and_damaged_checkpoints_are_never_loaded(
    tmp_path, monkeypatch
):
    model, optimizer = trained(steps=2)
    seen: list[str] = []
    for boundary in BOUNDARIES:
        run = tmp_path / boundary.replace(" ", "_")
        save(run, 5, model, optimizer)

        def kill_at(event, directory, boundary=boundary):
            seen.append(event)
            if event == boundary:
                raise _Killed(event)

        monkeypatch.setattr(save_module, "_boundary", kill_at)
        with pytest.raises(_Killed):
            save(run, 10, model, optimizer)
        monkeypatch.undo()

        final = run / step_dir_name(10)
        staging = run / (step_dir_name(10) + ".tmp")
        chosen, _ = latest_valid(run, architecture=TINY)
        renamed = boundary == "after rename"
        assert chosen == (final if renamed else run / step_dir_name(5)), (
            f"killed at {boundary!r}: the loader chose {chosen}"
        )
        verify_checkpoint(chosen)
        # The final name only ever holds a complete checkpoint.
        if final.exists():
            report = inspect_checkpoint(final)
            assert report.valid, f"killed at {boundary!r}: partial {final}: {report.problems}"
        # A manifest, wherever it exists, is written only over complete data.
        for directory in (final, staging):
            if (directory / MANIFEST_FILE).exists():
                listed = json.loads((directory / MANIFEST_FILE).read_text())["files"]
                present = {p.name for p in directory.iterdir()}
                assert set(listed) <= present, (
                    f"killed at {boundary!r}: {directory / MANIFEST_FILE} lists "
                    f"{sorted(set(listed) - present)}, not yet written"
                )
        # The next save of step 10 after the crash succeeds (stale staging is replaced).
        if not renamed:
            save(run, 10, model, optimizer)
            assert latest_valid(run)[0] == final
    assert seen.index("wrote manifest.json") > seen.index("wrote state.json")

    # A completed checkpoint with a truncated file, another without its manifest.
    run = tmp_path / "damaged"
    for step in (5, 10, 15):
        save(run, step, model, optimizer)
    damaged = run / step_dir_name(15) / "optimizer.safetensors"
    damaged.write_bytes(damaged.read_bytes()[:-64])
    (run / step_dir_name(10) / MANIFEST_FILE).unlink()
    chosen, skipped = latest_valid(run, architecture=TINY)
    assert chosen == run / step_dir_name(5), f"the loader chose {chosen}"
    reasons = dict(skipped)
    assert f"{damaged}: size" in reasons[run / step_dir_name(15)]
    assert "manifest.json: missing" in reasons[run / step_dir_name(10)]


@pytest.fixture
def two_checkpoints(tmp_path):
    model, optimizer = trained(steps=2)
    save(tmp_path, 5, model, optimizer)
    save(tmp_path, 10, model, optimizer)
    return tmp_path, tmp_path / step_dir_name(5), tmp_path / step_dir_name(10)


def _assert_refused(path, *needles):
    with pytest.raises(CheckpointError) as info:
        verify_checkpoint(path)
    for needle in needles:
        assert needle in str(info.value), f"{needle!r} not in: {info.value}"
    model, optimizer = fresh()
    with pytest.raises(CheckpointError):
        load_checkpoint(path, model, optimizer)


@pytest.mark.parametrize(
    "name", ["model.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json"]
)
def test_a_flipped_byte_in_any_file_is_refused_naming_the_file(two_checkpoints, name):
    run, _, newest = two_checkpoints
    data = bytearray((newest / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (newest / name).write_bytes(bytes(data))
    _assert_refused(newest, f"{newest / name}: sha256 differs")
    chosen, skipped = latest_valid(run)
    assert chosen == run / step_dir_name(5)
    assert skipped and skipped[0][0] == newest and name in skipped[0][1]


def test_a_truncated_file_and_a_missing_manifest_are_refused_and_skipped(two_checkpoints):
    run, older, newest = two_checkpoints
    model_file = newest / "model.safetensors"
    model_file.write_bytes(model_file.read_bytes()[:-100])
    _assert_refused(newest, str(model_file), "size")
    (older / MANIFEST_FILE).unlink()
    _assert_refused(older, f"{older / MANIFEST_FILE}: missing")
    chosen, skipped = latest_valid(run)
    assert chosen is None, f"chose {chosen}"
    assert [p for p, _ in skipped] == [newest, older]
    assert "manifest.json: missing" in skipped[1][1]


def test_the_newest_directory_without_a_manifest_is_never_chosen(two_checkpoints):
    run, older, newest = two_checkpoints
    (newest / MANIFEST_FILE).unlink()
    chosen, skipped = latest_valid(run)
    assert chosen == older, f"chose {chosen}, a directory without a manifest"
    assert [p for p, _ in skipped] == [newest]
    assert f"{newest / MANIFEST_FILE}: missing" in skipped[0][1]


def test_a_manifest_naming_a_missing_file_a_planted_pickle_or_another_architecture_is_refused(
    two_checkpoints,
):
    run, older, newest = two_checkpoints
    (newest / "rng.json").unlink()
    _assert_refused(newest, f"{newest / 'rng.json'}: listed in the manifest but missing")
    (older / "evil.pt").write_bytes(b"\x80\x04\x95")
    _assert_refused(older, f"{older / 'evil.pt'}: unexpected file")
    shutil.rmtree(newest)
    (older / "evil.pt").unlink()
    other = dataclasses.replace(TINY, hidden_size=128)
    with pytest.raises(
        CheckpointError, match=r"architecture differs: hidden_size 64 \(expected 128\)"
    ):
        verify_checkpoint(older, architecture=other)
    assert latest_valid(run, architecture=other)[0] is None
    assert latest_valid(run, architecture=TINY)[0] == older
