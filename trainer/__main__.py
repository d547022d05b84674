"""``python -m trainer``: the same command line as ``trainer`` (and what torchrun runs:
``torchrun --nproc_per_node N -m trainer apply CONFIG``)."""

from __future__ import annotations

import sys

from trainer.cli import main

if __name__ == "__main__":
    sys.exit(main())
