"""FLOP accounting: the model FLOPs of one token of training, and the device's peak, whose
ratio to the achieved rate is the MFU a metrics line reports on CUDA.

    flops_per_token(cfg, seq_len) * tokens_per_s / peak_flops(device)   # MFU

MFU = achieved model FLOP/s / the device's peak bf16 FLOP/s, with the model FLOPs of one
token of training (forward + backward = 3 x forward) counted as in PaLM (Chowdhery et
al. 2022, appendix B):

    flops_per_token = 6 * N  +  12 * L * H * T
                      \\_____/    \\___________/
    matmuls over N non-embedding   attention scores and weighted values: QK^T and AV are
    parameters (2 per multiply-     2 * T * H multiply-adds per token and layer forward,
    add, x3 for fwd + bwd)          x2 FLOPs, x3 fwd + bwd  (H = heads * head_dim)

N counts every weight matrix a token is multiplied by (including lm_head), not the
embedding lookup, which is a gather. Causal masking is not discounted (as in PaLM). A CPU
has no datasheet peak to divide by: no MFU there; its records carry peak_fraction instead,
the same model FLOP/s over the CPU's measured float32 matmul peak (roofline.py).

Here in plan (layer 5) so that `trainer plan` counts a step's FLOPs as the run's metrics
do; trainer/train/flops.py re-exports it for the loop.
"""

from __future__ import annotations

import torch

from trainer.model.config import LlamaConfig

#: Dense bf16 peak FLOP/s by device-name fragment (vendor datasheets, no sparsity).
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


def matmul_params(cfg: LlamaConfig) -> int:
    """Parameters of every matrix a token is multiplied by (layers and lm_head)."""
    hidden, head_dim = cfg.hidden_size, cfg.resolved_head_dim
    q_out = cfg.num_attention_heads * head_dim
    kv_out = cfg.num_key_value_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    mlp = 3 * hidden * cfg.intermediate_size
    return cfg.num_hidden_layers * (attention + mlp) + hidden * cfg.vocab_size


def flops_per_token(cfg: LlamaConfig, seq_len: int) -> float:
    """Training FLOPs per token: 6 N + 12 L H T (see the module docstring)."""
    attention_width = cfg.num_attention_heads * cfg.resolved_head_dim
    return 6.0 * matmul_params(cfg) + 12.0 * cfg.num_hidden_layers * attention_width * seq_len


def peak_flops(device: torch.device) -> float | None:
    """The device's peak bf16 FLOP/s, or None when unknown (then no MFU is reported)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for fragment, peak in PEAK_BF16_FLOPS.items():
        if fragment in name:
            return peak
    return None
