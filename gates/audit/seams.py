"""Seams: before `gates audit` runs any test under a mutant, check every attribute the mutant
patches (issue 18 item 5).

A mutant names its seams by patching them (``patch.setattr(module, "attr", replacement)``).
When the code moves on, a seam can drift under it: the attribute is renamed (a patch with
``raising=False`` then adds a new attribute nothing reads, and the mutant silently becomes the
real code), or the function gains a parameter the replacement does not take (every test then
dies of a TypeError, which once counted as a kill). So each mutant is applied once, dry, with
a ``patch`` that checks and records each setattr/delattr; the patches are undone and no test
runs. A seam is

- ``ok``: the attribute exists and, where the original and the replacement are callables,
  every way the original can be called (each split of its parameters into positional,
  keyword and omitted, plus extra ``*args``/``**kwargs`` where it takes them) binds to the
  replacement's signature; an attribute that is not callable may be replaced by anything;
- ``missing``: no such attribute (or no such module, for ``setattr("pkg.mod.attr", …)``);
- ``incompatible``: some call of the original does not bind to the replacement, or a
  callable is replaced by something that cannot be called;
- ``unchecked``: one of the two has no signature ``inspect`` can read (some builtins).

A mutant with a missing or incompatible seam, or whose application raises, is *seam-broken*.
The check runs in a child process, ``python -m gates.audit.seams --root DIR --out FILE ID...``
(importing the mutants imports the project; the audit's own process stays clean of it),
which writes one JSON object per mutant, atomically; a report it cannot write (a full disk)
is an OSError naming the file in the audit, never a report read half-written.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import itertools
import json
import os
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from gates import exit_codes, mutants
from gates.io import files, jsonfile

OK, MISSING, INCOMPATIBLE, UNCHECKED = "ok", "missing", "incompatible", "unchecked"
BROKEN = (MISSING, INCOMPATIBLE)

#: Above this many parameters the (n+1)·2^n calls of a signature are not enumerated.
_MAX_PARAMETERS = 14
#: The child's report: a few hundred bytes a mutant.
MAX_REPORT_BYTES = 64 * 1024 * 1024
_UNSET = object()

P = inspect.Parameter
_POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class Seam:
    owner: str  # "trainer.tokenizer.bpe", "trainer.model.Block", "<Foo instance>"
    attribute: str
    status: str  # ok | missing | incompatible | unchecked
    original: str | None = None  # signatures, annotations dropped and defaults shown as …
    replacement: str | None = None
    reason: str = ""

    @property
    def target(self) -> str:
        return f"{self.owner}.{self.attribute}"

    def describe(self) -> str:
        sigs = f"; original {self.original}, replacement {self.replacement}"
        return (
            f"{self.target}: {self.status}"
            + (f" ({self.reason})" if self.reason else "")
            + (sigs if self.original or self.replacement else "")
        )


@dataclass(frozen=True)
class SeamReport:
    """What applying one mutant dry found."""

    mutant: str
    seams: tuple[Seam, ...] = ()
    error: str | None = None  # the mutant could not be applied at all, and why

    @property
    def broken(self) -> bool:
        return self.error is not None or any(s.status in BROKEN for s in self.seams)

    def problems(self) -> list[str]:
        found = [self.error] if self.error else []
        return found + [s.describe() for s in self.seams if s.status in BROKEN]

    def to_json(self) -> dict:
        return {
            "ok": not self.broken,
            "error": self.error,
            "seams": [asdict(s) for s in self.seams],
        }

    @classmethod
    def from_json(cls, mutant: str, data: dict) -> SeamReport:
        return cls(mutant, tuple(Seam(**s) for s in data["seams"]), data["error"])


# ---------------------------------------------------------------- signatures (pure)
class _Elided:
    def __repr__(self) -> str:
        return "…"


def render(sig: inspect.Signature) -> str:
    """``(a, b=…, *, c)``: names and kinds only; a default's repr can hold a machine's path
    or an object address, and annotations say nothing about binding."""
    params = [
        p.replace(annotation=P.empty, default=P.empty if p.default is P.empty else _Elided())
        for p in sig.parameters.values()
    ]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


def calls(sig: inspect.Signature) -> Iterator[tuple[list[str], list[str]]]:
    """Every way ``sig`` can be called, as (names passed positionally, names passed by
    keyword): a prefix of its positional parameters positionally, each later parameter by
    keyword or (when it has a default) left out; ``*args``/``**kwargs`` add one extra."""
    params = [p for p in sig.parameters.values() if p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    kinds = {p.kind for p in sig.parameters.values()}
    positional = [p for p in params if p.kind in _POSITIONAL]
    for k in range(len(positional) + 1):
        head = positional[:k]
        options = []
        for p in params[k:]:  # positional parameters come first in any signature
            choices = [None] if p.default is not P.empty else []
            if p.kind is not P.POSITIONAL_ONLY:
                choices.append(p.name)
            options.append(choices)
        if any(not choices for choices in options):
            continue  # a required positional-only parameter left after the head
        extra_args = [[], ["*args"]] if k == len(positional) and P.VAR_POSITIONAL in kinds else [[]]
        extra_kwargs = [[], ["**kwargs"]] if P.VAR_KEYWORD in kinds else [[]]
        for chosen in itertools.product(*options):
            keywords = [name for name in chosen if name is not None]
            for more_args, more_kwargs in itertools.product(extra_args, extra_kwargs):
                yield [p.name for p in head] + more_args, keywords + more_kwargs


def unbound_call(original: inspect.Signature, replacement: inspect.Signature) -> str | None:
    """The first call of ``original`` that ``replacement`` cannot bind, and why; None if
    every call binds."""
    if len(original.parameters) > _MAX_PARAMETERS:
        return None
    failed = []  # (call shown, why, passed something by keyword)
    for positional, keywords in calls(original):
        # an extra keyword gets a name no parameter has, so only **kwargs can take it
        names = ["_shipgate_extra_" if k == "**kwargs" else k for k in keywords]
        try:
            replacement.bind(*positional, **dict.fromkeys(names))
        except TypeError as e:
            shown = ", ".join([*positional, *(f"{k}=…" for k in keywords)])
            failed.append((shown, str(e), bool(keywords)))
    if not failed:
        return None
    shown, why, _ = failed[0]
    reason = f"the call ({shown}) binds to the original, not to the replacement: {why}"
    if all(by_keyword for _, _, by_keyword in failed):
        # Today's callers may all pass them by position; tomorrow's keyword call would not.
        reason += "; every call by position binds: give the replacement the original's names"
    return reason


def compare(owner: str, attribute: str, original: object, replacement: object) -> Seam:
    """One seam's verdict: does ``replacement`` stand in for ``original``?"""
    if not callable(original):
        return Seam(owner, attribute, OK)
    try:
        o = inspect.signature(original)
    except (TypeError, ValueError):
        return Seam(owner, attribute, UNCHECKED, reason="the original has no signature")
    if not callable(replacement):
        reason = f"the original is callable, the replacement is a {type(replacement).__name__}"
        return Seam(owner, attribute, INCOMPATIBLE, render(o), None, reason)
    try:
        r = inspect.signature(replacement)
    except (TypeError, ValueError):
        return Seam(
            owner, attribute, UNCHECKED, render(o), reason="the replacement has no signature"
        )
    if len(o.parameters) > _MAX_PARAMETERS:
        return Seam(owner, attribute, UNCHECKED, render(o), render(r), "too many parameters")
    reason = unbound_call(o, r)
    return Seam(
        owner, attribute, INCOMPATIBLE if reason else OK, render(o), render(r), reason or ""
    )


# ---------------------------------------------------------------- the dry application
def owner_name(target: object) -> str:
    if isinstance(target, types.ModuleType):
        return target.__name__
    if isinstance(target, type):
        return f"{target.__module__}.{target.__qualname__}"
    return f"<{type(target).__qualname__} instance>"


def _as_looked_up(target: object, value: object) -> object:
    """What ``target.name`` gives once ``value`` is set: on a class, a classmethod binds to
    it and a staticmethod unwraps; on a module or an instance, the value itself."""
    if isinstance(target, type) and isinstance(value, classmethod | staticmethod):
        return value.__get__(None, target)
    return value


def _resolve(dotted: str) -> tuple[object, str]:
    """``"pkg.mod.Cls.attr"`` → (the object holding attr, "attr"), importing as needed, as
    pytest's ``monkeypatch.setattr("pkg.mod.attr", value)`` does."""
    path, attribute = dotted.rsplit(".", 1)
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        try:
            owner: object = importlib.import_module(".".join(parts[:n]))
        except ImportError:
            continue
        for part in parts[n:]:
            owner = getattr(owner, part)
        return owner, attribute
    raise ImportError(f"no module in {path!r}")


class RecordingPatch(pytest.MonkeyPatch):
    """The ``patch`` a mutant gets in a dry application: each setattr/delattr is checked and
    recorded; a patch of a missing attribute is recorded and *not* made (even with
    ``raising=False``), so the mutant's later lines see what they would see for real."""

    def __init__(self) -> None:
        super().__init__()
        self.seams: list[Seam] = []
        self._originals: dict[tuple[int, str], object] = {}  # the real value, first patch

    def setattr(self, target, name=_UNSET, value=_UNSET, raising: bool = True) -> None:  # type: ignore[override]
        if value is _UNSET:  # setattr("pkg.mod.attr", value)
            dotted, value = target, name
            try:
                target, name = _resolve(dotted)
            except (ImportError, AttributeError) as e:
                owner, attribute = dotted.rsplit(".", 1)
                self.seams.append(Seam(owner, attribute, MISSING, reason=str(e)))
                return
        key = (id(target), name)
        if key not in self._originals:
            if not hasattr(target, name):
                self.seams.append(
                    Seam(owner_name(target), name, MISSING, reason="no such attribute")
                )
                return
            self._originals[key] = getattr(target, name)
        original = self._originals[key]
        self.seams.append(compare(owner_name(target), name, original, _as_looked_up(target, value)))
        super().setattr(target, name, value, raising=raising)

    def delattr(self, target, name=_UNSET, raising: bool = True) -> None:  # type: ignore[override]
        if name is _UNSET:
            target, name = _resolve(target)
        if not hasattr(target, name):
            self.seams.append(Seam(owner_name(target), name, MISSING, reason="deleted, not there"))
            return
        self.seams.append(Seam(owner_name(target), name, OK))
        super().delattr(target, name, raising=raising)


def apply_dry(mutant_id: str) -> SeamReport:
    """Apply a registered mutant with a RecordingPatch, undo it, and report its seams."""
    impl = mutants.REGISTRY.get(mutant_id)
    if impl is None:
        return SeamReport(mutant_id, error=f"no @mutant({mutant_id!r}) in the mutant modules")
    patch = RecordingPatch()
    try:
        impl(patch)
    except Exception as e:  # a stale source edit, a helper that moved: not appliable
        return SeamReport(mutant_id, tuple(patch.seams), f"applying it raised {_first_line(e)}")
    finally:
        patch.undo()
    return SeamReport(mutant_id, tuple(patch.seams))


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


# ---------------------------------------------------------------- parent and child
def check(root: Path, mutant_ids: list[str], timeout_s: float = 600) -> dict[str, SeamReport]:
    """Apply each mutant dry in a child process under ``root``; id → its report. When the
    child cannot run (the mutant modules do not import), every mutant carries that error."""
    if not mutant_ids:
        return {}
    env = {k: v for k, v in os.environ.items() if k != mutants.ENV_VAR}
    with tempfile.TemporaryDirectory(prefix="shipgate-seams-") as tmp:
        out = Path(tmp) / "seams.json"
        cmd = [
            sys.executable,
            "-m",
            "gates.audit.seams",
            "--root",
            ".",
            "--out",
            str(out),
            *mutant_ids,
        ]
        try:
            proc = subprocess.run(
                cmd,
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
            # A report it could not write (a full disk) is an I/O error naming the file,
            # not a seam problem of every mutant.
            files.raise_child_write_failure(proc.stderr, "the seam check's report")
            why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            done = proc.returncode == 0
        except subprocess.TimeoutExpired:
            why, done = f"the seam check timed out after {timeout_s} s", False
        if done and out.is_file():  # written whole or not at all (main)
            try:
                found = jsonfile.read_json(out, MAX_REPORT_BYTES)
                return {m: SeamReport.from_json(m, found[m]) for m in mutant_ids}
            except (jsonfile.JsonFileError, KeyError, TypeError) as exc:
                why = f"its report is unusable: {exc}"
    return {m: SeamReport(m, error=f"the seam check could not run: {why}") for m in mutant_ids}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m gates.audit.seams", description=__doc__.split("\n")[0]
    )
    p.add_argument("--root", type=Path, default=Path("."))
    p.add_argument("--out", type=Path, required=True, help="write the JSON here")
    p.add_argument("mutants", nargs="+", metavar="ID")
    args = p.parse_args(argv)
    try:
        mutants.load(args.root)
    except Exception as e:  # reported per mutant: the real run would fail the same way
        why = f"importing the mutant modules raised {_first_line(e)}"
        reports = [SeamReport(m, error=why) for m in args.mutants]
    else:
        reports = [apply_dry(m) for m in args.mutants]
    report = json.dumps({r.mutant: r.to_json() for r in reports}, indent=1) + "\n"
    try:  # whole or not at all: the parent never reads half a report
        files.atomic_write_bytes(args.out, report.encode())
    except OSError as exc:
        # A line of the child-to-parent protocol (files.raise_child_write_failure), not a
        # diagnostic for a user: it goes to the stream the parent reads, as it is.
        sys.stderr.write(files.child_write_failure(exc) + "\n")
        return exit_codes.USAGE
    return exit_codes.OK


if __name__ == "__main__":
    sys.exit(main())
