"""The Llama model: config and presets, analytic counts, vocab agreement (torch-free here).

The torch parts are imported explicitly: ``trainer.model.llama`` (the module, build_model)
and ``trainer.model.hf`` (config.json, safetensors weights). Importing this package must
not import torch, so `trainer validate` stays fast and torch-free.
Contract: C-LLAMA-370M-SOVEREIGN (contracts/llama-370m-sovereign-v1.yaml).
"""

from trainer.model.config import PRESETS, ArchProblem, LlamaConfig, ModelConfigError, preset
from trainer.model.params import param_count, parameter_shapes, tensor_count
from trainer.model.vocab import VocabMismatchError, check_vocab_agreement, tokenizer_vocab_size

__all__ = [
    "PRESETS",
    "ArchProblem",
    "LlamaConfig",
    "ModelConfigError",
    "VocabMismatchError",
    "check_vocab_agreement",
    "param_count",
    "parameter_shapes",
    "preset",
    "tensor_count",
    "tokenizer_vocab_size",
]
