"""A small project built in a temp dir for the gates tests: a library, a bound test, a
mutant, a measurement and a contract with comments, under git. Not a test module."""

from __future__ import annotations

import importlib.util
import subprocess
import textwrap
from pathlib import Path

CONTRACT = textwrap.dedent("""\
    # Widget contract: a fixture for gates promote/demote/audit.
    metadata:
      id: C-WIDGET
      version: 1.0.0   # bumped by gates promote
      status: PROPOSED
      kind: tooling
      created: 2026-01-05
      updated: 2026-01-05
      description: >-
        Counting lines of a text artifact. Long folded text stays exactly as written,
        however ruamel would have wrapped it.
    invariants:
      - id: INV-WIDGET-001
        statement: count_lines counts lines.
        falsified_by: [FALSIFY-WIDGET-001]   # flow style, kept
    falsification_tests:
      - id: FALSIFY-WIDGET-001
        rule: count a 3-line file
        prediction: "3"
        status: bound
        test: tests/test_widget.py::test_count_lines
        if_fails: counting is broken
        mutants:
          - id: count-off-by-one
            description: count_lines adds one
    gates:
      - id: GATE-WIDGET-001
        rule: the artifact has at least three lines
        falsification_tests:
          - FALSIFY-WIDGET-001
        threshold: {metric: line_count, comparator: ">=", value: 3, unit: lines}
        ship_blocking: true
        status: PENDING   # promoted only by gates promote
      - id: GATE-WIDGET-002
        rule: the artifact has at most a hundred lines
        falsification_tests:
          - FALSIFY-WIDGET-001
        threshold: {metric: line_count, comparator: "<=", value: 100, unit: lines}
        ship_blocking: false
        status: PENDING
    changelog:
      - version: 1.0.0
        date: 2026-01-05
        text: Initial.
    """)

WIDGET = "def count_lines(path):\n    return len(path.read_text().splitlines())\n"

TEST = textwrap.dedent("""\
    import pytest

    import widget


    @pytest.mark.ship_blocking
    def test_count_lines(tmp_path):
        p = tmp_path / "three.txt"
        p.write_text("a\\nb\\nc\\n")
        assert widget.count_lines(p) == 3
    """)

MUTANTS = textwrap.dedent("""\
    import widget

    from gates.mutants import mutant


    @mutant("count-off-by-one")
    def _off_by_one(patch):
        real = widget.count_lines
        patch.setattr(widget, "count_lines", lambda path: real(path) + 1)
    """)

MEASUREMENT = textwrap.dedent('''\
    """Registers the widget gates' measurement (imported by the tests and drivers)."""
    from pathlib import Path

    from gates.measure import Measurement, measures


    def is_text_file(path: Path):
        return None if path.is_file() else "a directory, not a text file"


    def line_count(ctx):
        (artifact,) = ctx.artifacts
        n = len(artifact.read_text().splitlines())
        return Measurement(values={"line_count": (n, "lines")},
                           workload=f"lines of {artifact.name}", inputs=[])


    for gate in ("GATE-WIDGET-001", "GATE-WIDGET-002"):
        measures(gate, artifact="text file", check=is_text_file)(line_count)
    ''')


#: GATE-WIDGET-001 (line_count >= 3) measured in process on a fixed 3-line text through the
#: library, where a mutant reaches it; GATE-WIDGET-002 on a text file as MEASUREMENT does.
MEASUREMENT_IN_PROCESS = textwrap.dedent("""\
    import tempfile
    from pathlib import Path

    import widget
    from gates.measure import Measurement, measures


    @measures("GATE-WIDGET-001")
    def three_lines_counted(ctx):
        with tempfile.TemporaryDirectory() as tmp:
            text = Path(tmp) / "three.txt"
            text.write_text("a\\nb\\nc\\n")
            n = widget.count_lines(text)
        return Measurement(values={"line_count": (n, "lines")},
                           workload="widget.count_lines of a fixed 3-line text")


    def on_a_file(ctx):
        (artifact,) = ctx.artifacts
        return Measurement(values={"line_count": (widget.count_lines(artifact), "lines")},
                           workload=f"lines of {artifact.name}")


    measures("GATE-WIDGET-002", artifact="text file", check=lambda p: None)(on_a_file)
    """)

#: A bug GATE-WIDGET-001's ">= 3" cannot see (count-off-by-one reads 4) and one it can.
MORE_MUTANTS = textwrap.dedent("""\

    @mutant("count-nothing")
    def _nothing(patch):
        patch.setattr(widget, "count_lines", lambda path: 0)
    """)


def build_measured_in_process(root: Path) -> Path:
    """The project built, then given MEASUREMENT_IN_PROCESS and MORE_MUTANTS (left for the
    caller to commit): where the mutants-against-measurements tests start. Returns the
    contract path."""
    contract = build(root)
    use_measurement_dir(root, MEASUREMENT_IN_PROCESS)
    mutants = root / "tests" / "mutants" / "widget_mutants.py"
    mutants.write_text(mutants.read_text() + MORE_MUTANTS)
    return contract


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def commit_all(root: Path, message: str) -> None:
    """``git add -A`` and commit, as a test author with no git identity configured."""
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-qm", message)


def use_measurement_dir(root: Path, measurement: str) -> None:
    """Move the project's measurement into ``gatework/`` (named in pyproject.toml's
    [tool.shipgate] measurements), as `gates` run from the command line finds it."""
    (root / "pyproject.toml").write_text(
        '# widget fixture project\n[tool.shipgate]\nmeasurements = ["gatework"]\n'
    )
    (root / "gatework").mkdir()
    (root / "gatework" / "widget_gates.py").write_text(measurement)


def build(root: Path) -> Path:
    """Write the project, commit it, and return the contract path."""
    (root / "tests" / "mutants").mkdir(parents=True)
    (root / "contracts").mkdir()
    (root / "pyproject.toml").write_text("# widget fixture project\n")
    (root / ".gitignore").write_text("runs/\n.cache/\n")  # artifacts and their cache
    (root / "conftest.py").write_text("# puts the project root on sys.path for mutants\n")
    (root / "widget.py").write_text(WIDGET)
    (root / "tests" / "test_widget.py").write_text(TEST)
    (root / "tests" / "mutants" / "widget_mutants.py").write_text(MUTANTS)
    (root / "widget_measurement.py").write_text(MEASUREMENT)
    contract = root / "contracts" / "widget-v1.yaml"
    contract.write_text(CONTRACT)
    git(root, "init", "-q")
    commit_all(root, "widget")
    return contract


def build_measured(root: Path) -> Path:
    """:func:`build`, with the GATE-WIDGET-* measurements registered in this process (for
    tests that call gates.promotion or gates.service directly); returns the contract path."""
    contract = build(root)
    spec = importlib.util.spec_from_file_location(
        "widget_measurement", root / "widget_measurement.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return contract
