"""The program a traced child runs: it reports the files its process opens, under the
project, to ``$SHIPGATE_TRACE_DIR`` (gates/provenance/trace.py says how, and why).

Two ways in. gates.provenance.trace copies this file, as it is, into a temporary directory as
``sitecustomize.py`` and puts that first on a child's ``PYTHONPATH``: Python runs it at
start-up, under the name ``sitecustomize``, and it starts reporting, then runs the
sitecustomize it shadows. A child forked from a warm interpreter (gates.runner.forkrun), which ran
its own start-up long ago, calls :func:`start` instead.

Standard library only, and self-contained: it runs in every child, before anything else.
"""

import os as _os
import sys as _sys
from importlib.machinery import PathFinder
from importlib.util import module_from_spec


def start():
    """Report what this process opens from now on, if $SHIPGATE_TRACE_DIR is set."""
    out = _os.environ.get("SHIPGATE_TRACE_DIR")
    if not out:
        return
    roots = [r for r in _os.environ.get("SHIPGATE_TRACE_ROOTS", "").split(_os.pathsep) if r]
    prefixes = tuple(r.rstrip(_os.sep) + _os.sep for r in roots)
    seen = set()
    state = {"pid": None, "fd": None, "opening": False, "failed": None}
    flags = _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT | getattr(_os, "O_CLOEXEC", 0)

    def failed(pid, error):
        # The report is cut short (a full disk): say so in a name, an empty file that needs
        # no data block, for the parent to raise; report nothing more from this process.
        state["failed"] = pid
        state["opening"] = True
        try:
            marker = f"{pid}.failed-{error.errno or 5}"
            _os.close(_os.open(_os.path.join(out, marker), flags, 0o600))
        except OSError:
            pass  # the parent still sees a last line cut short
        finally:
            state["opening"] = False

    def hook(event, args):
        if event != "open" or state["opening"] or state["failed"] == _os.getpid():
            return
        try:
            path = args[0]
            if isinstance(path, int):
                return
            path = _os.fspath(path)
            if isinstance(path, bytes):
                path = _os.fsdecode(path)
            path = _os.path.abspath(path)
            if (prefixes and not path.startswith(prefixes)) or path in seen or "\n" in path:
                return
            seen.add(path)
            pid = _os.getpid()
            if state["pid"] != pid:  # first report of this process (or of a fork of it)
                state["opening"] = True
                try:
                    state["fd"] = _os.open(_os.path.join(out, f"{pid}.paths"), flags, 0o600)
                finally:
                    state["opening"] = False
                state["pid"] = pid
            data = (path + "\n").encode("utf-8", "surrogateescape")
            while data:  # a short write is followed by the error that cut it
                data = data[_os.write(state["fd"], data) :]
        except OSError as error:
            failed(_os.getpid(), error)
        except Exception:
            pass

    _sys.addaudithook(hook)


def _chain():
    """Run the sitecustomize this one shadows, if any (the next on sys.path)."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    rest = [p for p in _sys.path if _os.path.abspath(p or ".") != here]
    try:
        spec = PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None:
            module = module_from_spec(spec)
            _sys.modules["_shipgate_shadowed_sitecustomize"] = module
            spec.loader.exec_module(module)
    except Exception as exc:
        _sys.stderr.write(f"shipgate trace: the shadowed sitecustomize failed: {exc!r}\n")


if __name__ == "sitecustomize":  # the copy a child's start-up runs
    start()
    _chain()
