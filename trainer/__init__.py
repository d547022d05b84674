"""shipgate reference trainer: byte-level BPE, corpus shards, Llama model, training loop.

The system the contracts in ``contracts/`` are falsified against. PyTorch, CUDA when
present, CPU otherwise. Entry point: the ``trainer`` command (``trainer.cli``).
"""

__version__ = "0.1.0"
