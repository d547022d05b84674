"""Evidence records the command line by program name, with paths under the project root
relative to it and absolute paths outside it by name only: never one machine's executable
or checkout path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gates.cli.common import recorded_command


def test_the_program_is_named_and_paths_under_the_root_become_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    root = tmp_path / "project"
    (root / "runs").mkdir(parents=True)
    argv = [
        "/home/someone/.venv/bin/gates",
        "promote",
        "GATE-X-001",
        "--artifact",
        str(root / "runs" / "step-2"),
        "--files",
        "contracts/x-v1.yaml",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    assert recorded_command("gates", root) == [
        "gates",
        "promote",
        "GATE-X-001",
        "--artifact",
        "runs/step-2",
        "--files",
        "contracts/x-v1.yaml",
    ]


def test_an_absolute_path_outside_the_root_is_recorded_by_name_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    outside = str(tmp_path / "elsewhere.txt")
    argv = ["/opt/bin/gates", "check", "G", "--artifact", outside, "--artifact", "../rel.txt"]
    monkeypatch.setattr(sys, "argv", argv)
    assert recorded_command("gates", tmp_path / "project") == [
        "gates",
        "check",
        "G",
        "--artifact",
        "…/elsewhere.txt",
        "--artifact",
        "../rel.txt",
    ]
