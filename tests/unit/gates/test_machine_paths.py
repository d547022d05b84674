"""The absolute-path detector behind EVIDENCE-ABSOLUTE-PATH: it must flag the paths of one
machine and nothing else, so each side has cases (a detector that flags everything, or
nothing, fails one of them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gates.io.machine_paths import absolute_paths, find_absolute, portable_command

ABSOLUTE = [
    ("/work/main/.venv/bin/gates", "/work/main/.venv/bin/gates"),
    ("/root/.pyenv/versions/3.11.7/lib/python3.11/argparse.py", None),
    ("/tmp/x", "/tmp/x"),
    ("/.venv/bin/python", "/.venv/bin/python"),
    ("artifact /tmp/gate-015/step-00000060 is gone", "/tmp/gate-015/step-00000060"),
    ("--out=/tmp/evidence.json", "/tmp/evidence.json"),
    ("'/home/someone/run' refused", "/home/someone/run"),
    ("(see /tmp/run.)", "/tmp/run"),
    ("config /tmp/a/370m.yaml: bad", "/tmp/a/370m.yaml"),
    ("C:\\Users\\someone\\run", "C:\\Users\\someone\\run"),
    ("d:/data/corpus.txt", "d:/data/corpus.txt"),
    ("\\\\server\\share\\run", "\\\\server\\share\\run"),
]

NOT_ABSOLUTE = [
    "1/2",
    "tokens/s",
    "12.5 tokens/s over 3/4 of the steps",
    "a / b",
    "loss / steps",
    "/",
    "https://example.org/a/b",
    "file:///already/a/url",
    "runs/gates/loop-run",
    "./relative/path",
    "../up/one",
    "~/home-relative",
    "tests/test_demo.py::test_add_zero",
    "…/artifact.txt",
    "AMD EPYC 7B13 64-Core Processor",
    "x + 0 == x",
    "",
]


@pytest.mark.parametrize(("text", "token"), ABSOLUTE)
def test_an_absolute_path_is_found(text: str, token: str | None):
    assert find_absolute(text) == (token or text)


@pytest.mark.parametrize("text", NOT_ABSOLUTE)
def test_what_only_contains_a_slash_is_not_a_path(text: str):
    assert find_absolute(text) is None


def test_every_string_and_key_of_a_document_is_searched_and_located():
    doc = {
        "command": ["gates", "check", "G", "--artifact", "/tmp/a.txt"],
        "rate": "12 tokens/s",
        "cases": {"/etc/passwd": 1, "fine": [{"message": "C:\\x\\y failed"}]},
        "n": 3,
    }
    assert list(absolute_paths(doc)) == [
        (("command", 4), "/tmp/a.txt"),
        (("cases", "/etc/passwd"), "/etc/passwd"),
        (("cases", "fine", 0, "message"), "C:\\x\\y"),
    ]
    assert list(absolute_paths({"command": ["gates", "check"], "rate": "1/2"})) == []


def test_a_command_records_the_program_by_name_and_no_machine_path(tmp_path: Path):
    root = tmp_path / "project"
    (root / "runs").mkdir(parents=True)
    argv = [
        "check",
        "G",
        "--artifact",
        str(root / "runs" / "a"),
        "--artifact",
        str(tmp_path / "elsewhere" / "b.txt"),
        f"--out={tmp_path / 'ev.json'}",
        "--files",
        "contracts/x-v1.yaml",
        "../sibling/c.txt",
    ]
    recorded = portable_command("/home/someone/.venv/bin/gates", argv, root)
    assert recorded == [
        "gates",
        "check",
        "G",
        "--artifact",
        "runs/a",
        "--artifact",
        "…/b.txt",
        "--out=…/ev.json",
        "--files",
        "contracts/x-v1.yaml",
        "../sibling/c.txt",
    ]
    assert list(absolute_paths(recorded)) == []
