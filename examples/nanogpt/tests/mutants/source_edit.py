"""Mutants as source edits: a known bug is one textual change to one function of the script.

The edited function is recompiled in its own module's namespace and patched over the
original, so everything else is the real code and the script needs no seams for its tests.
An edit whose text is not found exactly once raises: a stale mutant stops pytest with an
error (`gates audit` reports ERROR), never a silent survivor or a false kill.
"""

import inspect
import sys
import textwrap


def edit(patch, owner, name: str, old: str, new: str) -> None:
    """Patch owner.name (a function of a module, or a method of a class) with a copy whose
    source has `old` replaced by `new`; `patch` is the audit's pytest.MonkeyPatch."""
    target = getattr(owner, name)
    lines, first = inspect.getsourcelines(target)
    source = textwrap.dedent("".join(lines))
    found = source.count(old)
    if found != 1:
        raise LookupError(f"{owner.__name__}.{name}: {old!r} occurs {found} times, not once")
    module = sys.modules[target.__module__]
    # blank lines in front keep tracebacks pointing at the original line numbers
    code = compile("\n" * (first - 1) + source.replace(old, new), inspect.getfile(target), "exec")
    namespace: dict = {}
    exec(code, vars(module), namespace)
    patch.setattr(owner, name, namespace[name])
