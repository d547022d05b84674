"""Library modules never print (issue 18): a diagnostic is a log record (``log =
logging.getLogger(__name__)``), and output meant for a user goes to a stream or a callback
its caller passes in; only a command-line module decides what reaches the terminal.

The rule, read from the source (ast), never by importing: no module under trainer/ or
gates/ calls the builtin ``print``, except the command-line modules, which are

- trainer/cli.py, the ``trainer`` parser;
- every ``commands.py`` (one package's ``trainer`` subcommands, trainer/__init__.py);
- every ``__main__.py`` (``python -m PACKAGE``);
- everything under gates/cli/ (the ``pv`` and ``gates`` commands).

And every trainer entry point installs the "trainer" logger's terminal handler, so a
record reaches stderr as the ``trainer: MESSAGE`` line the trainer printed before.

    .venv/bin/pytest -q tests/unit/test_library_output.py
"""

from __future__ import annotations

import ast
import io
import logging
from pathlib import Path

import pytest

from trainer import terminal

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("trainer", "gates")
#: Entry points whose main() must call terminal.install() (trainer/terminal.py).
ENTRY_POINTS = ("trainer/cli.py", "trainer/oracle/__main__.py")


def is_command_line_module(path: Path) -> bool:
    """The modules allowed to print: see the module docstring."""
    relative = path.relative_to(ROOT)
    return (
        relative.as_posix() == "trainer/cli.py"
        or path.name in ("commands.py", "__main__.py")
        or relative.parts[:2] == ("gates", "cli")
    )


def print_calls(path: Path) -> list[int]:
    """Lines of ``path`` that call the builtin print (a bare ``print(...)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
    ]


def library_prints(root: Path = ROOT) -> list[str]:
    """``path:line`` of every print call in a library module under trainer/ and gates/."""
    return [
        f"{path.relative_to(root)}:{line}"
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
        if not is_command_line_module(path)
        for line in print_calls(path)
    ]


def test_no_library_module_of_trainer_or_gates_calls_print():
    found = library_prints()
    assert not found, (
        "library modules print (log with logging.getLogger(__name__), or write to a stream "
        "the caller passes in):\n" + "\n".join(found)
    )


def test_the_print_reader_finds_a_call_and_not_a_method_or_a_docstring(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        '"""print(x) in a docstring is documentation."""\n'
        "console.print('a method of another object')\n"
        "def f():\n"
        "    print('found', flush=True)\n",
        encoding="utf-8",
    )
    assert print_calls(module) == [4]


@pytest.mark.parametrize(
    ("relative", "allowed"),
    [
        ("trainer/cli.py", True),
        ("trainer/store/commands.py", True),
        ("trainer/oracle/__main__.py", True),
        ("gates/cli/pv.py", True),
        ("trainer/train/metrics.py", False),
        ("trainer/clip.py", False),
        ("gates/report/page.py", False),
    ],
)
def test_only_command_line_modules_may_print(relative, allowed):
    assert is_command_line_module(ROOT / relative) is allowed


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_trainer_entry_point_installs_the_terminal_handler(entry):
    tree = ast.parse((ROOT / entry).read_text(encoding="utf-8"))
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    calls = [ast.unparse(node.func) for node in ast.walk(main) if isinstance(node, ast.Call)]
    assert "terminal.install" in calls, f"{entry}: main() does not call terminal.install()"


@pytest.fixture
def installed():
    """terminal.install() on a clean "trainer" logger, taken off again afterwards."""
    logger = logging.getLogger(terminal.LOGGER_NAME)
    before = (list(logger.handlers), logger.level)
    for handler in before[0]:
        logger.removeHandler(handler)
    yield terminal.install()
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    for handler in before[0]:
        logger.addHandler(handler)
    logger.setLevel(before[1])


def test_a_record_reaches_stderr_as_the_line_the_trainer_printed(installed, capsys):
    assert terminal.install() is installed, "a second install adds no second handler"
    logging.getLogger("trainer.store.recorder").warning("WARNING: run store %s", "x/runs.db")
    logging.getLogger("trainer.train.checkpointing").info("resuming from %s", "step-00000004")
    logging.getLogger("trainer.train.loop").debug("not shown: below INFO")
    assert capsys.readouterr().err == (
        "trainer: WARNING: run store x/runs.db\ntrainer: resuming from step-00000004\n"
    )


def test_a_record_never_runs_into_the_progress_line(installed, monkeypatch):
    screen = io.StringIO()
    screen.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stderr", screen)
    line = terminal.progress_line()
    assert line is installed
    line.draw_progress("step 1/9")
    line.draw_progress("step 2/9")
    logging.getLogger("trainer.train.loop").warning("alert: step 2")
    line.draw_progress("step 3/9")
    line.end_progress()
    line.end_progress()  # nothing on screen: no empty line
    assert screen.getvalue() == "\rstep 1/9\rstep 2/9\ntrainer: alert: step 2\n\rstep 3/9\n"


def test_no_progress_line_off_a_terminal_or_without_an_entry_point(installed, capsys):
    assert terminal.progress_line() is None  # capsys: not a terminal
    logging.getLogger(terminal.LOGGER_NAME).removeHandler(installed)
    assert terminal.progress_line() is None
