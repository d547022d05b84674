"""pytest's root conftest for the example: its presence puts this directory on sys.path
(pytest's default "prepend" import mode), so tests and mutants import ``team_trainer`` as
the Trainer pack's factory loader does. Also keeps the Hub offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
