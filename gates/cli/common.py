"""What every shipgate CLI shares: contract discovery and the no-traceback wrapper."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from gates import exit_codes


class UsageError(Exception):
    """Bad command line or unreadable input: printed as `prog: error: …`, exit 2."""


def default_contracts() -> list[Path]:
    found = sorted(Path("contracts").glob("*.yaml"))
    if not found:
        raise UsageError("no files given and no contracts/*.yaml under the current directory")
    return found


def run_guarded(prog: str, fn: Callable[[], int], debug: bool) -> int:
    """Run a command; map errors to exit codes, and show tracebacks only under --debug."""
    try:
        return fn()
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exit_codes.USAGE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return exit_codes.OK
    except Exception as exc:
        if debug:
            traceback.print_exc()
        print(
            f"{prog}: internal error: {type(exc).__name__}: {exc}"
            + ("" if debug else " (re-run with --debug for the traceback)"),
            file=sys.stderr,
        )
        return exit_codes.INTERNAL
