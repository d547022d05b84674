"""pytest's root conftest for the example: its presence puts this directory on sys.path
(pytest's default "prepend" import mode), so tests import the example's module as
``import hf_example``, the way the gate measurements do. Also keeps the Hub offline."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
