"""The static node index finds real tests and their markers without importing anything."""

import subprocess
import sys
from pathlib import Path

import pytest

from gates.pv.pytest_nodes import NodeIndex

PROJECT = Path(__file__).resolve().parents[2] / "fixtures" / "pv_project"


@pytest.fixture(scope="module")
def index() -> NodeIndex:
    return NodeIndex(PROJECT)


@pytest.mark.parametrize(
    ("node", "exists", "ship_blocking"),
    [
        ("tests/test_demo.py::test_add_zero", True, True),
        ("tests/test_demo.py::test_unmarked", True, False),
        ("tests/test_demo.py::TestGroup::test_in_class", True, True),
        ("tests/test_demo.py::test_param[1]", True, False),
        ("tests/test_demo.py::test_unmarked[1]", False, False),
        ("tests/test_demo.py::helper_not_a_test", False, False),
        ("tests/test_demo.py::test_missing", False, False),
        ("tests/test_demo.py::NoClass::test_add_zero", False, False),
        ("tests/test_nothing.py::test_add_zero", False, False),
    ],
)
def test_lookup(index, node, exists, ship_blocking):
    info = index.lookup(node)
    assert info.exists is exists, info.reason
    assert ("ship_blocking" in info.markers) is ship_blocking
    if not exists:
        assert info.reason


def test_module_level_pytestmark_applies(tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_m.py").write_text(
        "import pytest\npytestmark = [pytest.mark.slow, pytest.mark.ship_blocking]\n"
        "def test_a():\n    pass\n"
    )
    info = NodeIndex(tmp_path).lookup("tests/test_m.py::test_a")
    assert info.exists and {"slow", "ship_blocking"} <= info.markers


def test_a_syntax_error_in_the_test_file_is_a_reason_not_a_crash(tmp_path: Path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_bad.py").write_text("def test_a(:\n")
    info = NodeIndex(tmp_path).lookup("tests/test_bad.py::test_a")
    assert not info.exists and "syntax error" in info.reason


def test_validation_never_imports_torch_or_runs_tests():
    code = (
        "import sys\n"
        "from gates.cli.pv import main\n"
        "rc = main(['validate', 'tests/fixtures/pv_project/contracts/valid/demo-v1.yaml'])\n"
        "assert rc == 0, rc\n"
        "assert 'torch' not in sys.modules and 'pytest' not in sys.modules\n"
    )
    root = Path(__file__).resolve().parents[3]
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, capture_output=True)
