"""Named exit codes shared by the `pv` and `gates` command-line tools."""

OK = 0
#: Validation errors found, or a requirement (e.g. ``--require-ship-ready``) not met.
FINDINGS = 1
#: Bad command line, or a path that cannot be read (missing, a directory, no permission).
USAGE = 2
#: A bug in shipgate itself; the traceback is shown only with ``--debug``.
INTERNAL = 3
