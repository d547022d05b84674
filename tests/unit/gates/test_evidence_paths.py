"""An input outside the project is recorded without one machine's path: relative to the
interpreter's library directories, else by name (the BPE gates' corpus is the standard
library of whatever Python runs them)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gates.io.machine_paths import find_absolute
from gates.provenance.evidence import portable_path

ROOT = Path(__file__).resolve().parents[3]


def test_a_project_file_is_relative_to_the_root():
    assert (
        portable_path(ROOT / "gates" / "provenance" / "evidence.py", ROOT)
        == "gates/provenance/evidence.py"
    )


def test_a_standard_library_file_is_named_from_the_standard_library():
    assert portable_path(Path(argparse.__file__), ROOT) == "<stdlib>/argparse.py"
    assert portable_path(Path(json.__file__), ROOT) == "<stdlib>/json/__init__.py"


def test_a_temporary_file_is_named_from_the_temporary_directory(tmp_path: Path):
    shown = portable_path(tmp_path / "corpus.txt", ROOT)
    assert shown.startswith("<tmp>/") and shown.endswith(f"/{tmp_path.name}/corpus.txt")
    assert find_absolute(shown) is None and find_absolute(str(tmp_path)) is not None


def test_anything_else_keeps_only_its_name():
    assert portable_path(Path("/opt/data/corpus.txt"), ROOT) == "…/corpus.txt"
