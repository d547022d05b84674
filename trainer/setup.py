"""The one compiled part of shipgate-trainer: bpe's merge loop (tokenizer/_merge_loop.c).
Everything else is in pyproject.toml. The module carries its source's SHA-256
(SOURCE_SHA256), so bpe can refuse a module built from other source (an edit since the
last `pip install -e trainer`)."""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "tokenizer/_merge_loop.c"
digest = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()

setup(
    ext_modules=[
        Extension(
            "trainer.tokenizer._merge_loop",
            sources=[SOURCE],
            define_macros=[("SOURCE_SHA256", f'"{digest}"')],
            extra_compile_args=["-O2"],
        )
    ]
)
