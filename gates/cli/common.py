"""What every shipgate CLI shares: contract discovery and the no-traceback wrapper."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from gates import exit_codes
from gates.io.machine_paths import portable_command
from gates.model.contract import Contract
from gates.model.schema import did_you_mean
from gates.pv.render import render
from gates.refusal import RefusedError
from gates.service import ContractsUnusableError, usable_contracts


class UsageError(Exception):
    """Bad command line or unreadable input: printed as `prog: error: …`, exit 2."""


def default_contracts() -> list[Path]:
    found = sorted(Path("contracts").glob("*.yaml"))
    if not found:
        raise UsageError("no files given and no contracts/*.yaml under the current directory")
    return found


def add_contract_arguments(p: argparse.ArgumentParser, *, flag: bool = False) -> None:
    """FILE... (or --files FILE... where a positional is taken) and --root."""
    names = ["--files"] if flag else ["files"]
    p.add_argument(
        *names,
        nargs="*",
        type=Path,
        metavar="FILE",
        default=[],
        help="contract YAML files (default: contracts/*.yaml)",
    )
    p.add_argument(
        "--root",
        type=Path,
        default=None,
        help="project root for test ids and evidence paths "
        "(default: nearest ancestor with pyproject.toml)",
    )


def valid_contracts(
    args: argparse.Namespace, prog: str, *, remeasuring: bool = False
) -> list[Contract]:
    """Validated contracts for commands that read them (gates.service.usable_contracts):
    refused when any has an error; a command that re-measures (``remeasuring``) goes on over
    errors about recorded evidence or the audit, and says how many."""
    try:
        usable = usable_contracts(
            args.files or default_contracts(),
            root=args.root,
            debug=args.debug,
            remeasuring=remeasuring,
        )
    except ContractsUnusableError as exc:
        if exc.unreadable:
            raise UsageError(str(exc)) from None
        print(render(exc.report, "text"), file=sys.stderr)
        raise ContractsInvalidError(
            f"{prog}: contracts do not validate; fix the errors above"
        ) from None
    if usable.waived:
        print(
            f"{prog}: {usable.waived} finding(s) about recorded evidence (`pv validate` lists "
            "them) do not stop a re-measurement",
            file=sys.stderr,
        )
    return usable.contracts


def require_known(kind: str, value: str | None, known: list[str]) -> None:
    """Usage error for an unknown id, with the nearest known one as a suggestion."""
    if value is not None and value not in known:
        guess = did_you_mean(value, known)
        raise UsageError(f"unknown {kind} {value}" + (f"; did you mean {guess}?" if guess else ""))


class ContractsInvalidError(Exception):
    """The contracts a command reads have validation errors: exit 1, errors on stderr."""


def run_guarded(prog: str, fn: Callable[[], int], debug: bool) -> int:
    """Run a command; map errors to exit codes, and show tracebacks only under --debug."""
    try:
        return fn()
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except ContractsInvalidError as exc:
        print(str(exc), file=sys.stderr)
        return exit_codes.FINDINGS
    except RefusedError as exc:
        print(f"{prog}: refused, nothing changed: {exc}", file=sys.stderr)
        return exit_codes.FINDINGS
    except BrokenPipeError:  # before OSError, its base class
        return exit_codes.stop_on_broken_pipe()
    except OSError as exc:
        # I/O failures (read-only evidence directory, disk full) are exit 2, not a traceback.
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"{prog}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return exit_codes.USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            traceback.print_exc()
        print(
            f"{prog}: internal error: {type(exc).__name__}: {exc}"
            + ("" if debug else " (re-run with --debug for the traceback)"),
            file=sys.stderr,
        )
        return exit_codes.INTERNAL


def recorded_command(prog: str, root: Path) -> list[str]:
    """The command line as evidence records it: the program by name, never the absolute path
    of one machine's executable; paths under the project root relative to it, absolute
    paths outside it as ``…/<name>`` (gates.io.machine_paths.portable_command)."""
    return portable_command(prog, sys.argv[1:], root)


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1 (``--jobs``)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return value
