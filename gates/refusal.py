"""The one refusal of gate tooling: a gate that cannot be checked, promoted or demoted.

Light on purpose (no imports): the CLI catches it in every command, and a `pv` command that
only validates must not load the measuring code that raises it (gates.check).
"""


class RefusedError(Exception):
    """The gate cannot be checked or promoted; the message says why. Nothing was written."""
