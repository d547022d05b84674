"""The Llama decoder in PyTorch, with transformers.LlamaForCausalLM's tensor names.

    model = build_model(preset("tiny"), seed=0)         # CPU, float32, initialized
    logits = model(input_ids)                           # [B, T] int64 -> [B, T, vocab] float32
    model = build_model(preset("370m"), device="meta")  # shapes and counts, no memory

Architecture (Touvron et al. 2023): token embedding; per layer, pre-norm RMSNorm ->
grouped-query attention with RoPE (rotate-half convention, theta from the config) ->
residual, RMSNorm -> SwiGLU MLP (separate gate_proj and up_proj) -> residual; final
RMSNorm; lm_head (or the embedding, when tied). No biases. Attention runs through
torch.nn.functional.scaled_dot_product_attention (causal); the KV heads are repeated
explicitly so that query head h reads KV head h // group, as HF's repeat_kv does.
Numerics follow HF's: RMSNorm in float32 then cast back, cos/sin cast to the
activations' dtype, so float32 logits match LlamaForCausalLM (eager) to ~1e-6 and
autocast (bf16 on CUDA) works unchanged. "In float32" means "in at least float32": a
float64 model (the golden traces, tests/golden/traces.py) computes both in float64, so
no step of it rounds to float32. Contract: C-LLAMA-370M-SOVEREIGN.

Initialization (build_model): every Linear and the embedding ~ N(0, 0.02); the two
projections that write into the residual stream (o_proj, down_proj) ~ N(0, 0.02 /
sqrt(2 * num_hidden_layers)); RMSNorm weights 1. Why scaled: the residual stream is a
sum of 2 * layers branch outputs, so with a plain 0.02 its variance at init grows with
depth (x48 for the 24-layer 370m); scaling the last projection of each branch keeps it
near the embedding's whatever the depth (GPT-2, Radford et al. 2019; nanoGPT's c_proj).
HF's own _init_weights uses a plain 0.02, which matters only for fresh HF models, not
for loading ours. A seed makes initialization reproducible on a given device without
touching the global RNG.

Small named seams (_linear, _embedding, _embedding_rows, _inv_freq, _rotate_half,
_apply_rope, _repeat_kv, _attend, _mlp_activation, _swiglu) exist so tests/mutants/model.py can
inject each known bug of the contract in one place.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812 - the universal alias
from torch import nn

from trainer.model.config import INIT_STD, LlamaConfig


# ---------------------------------------------------------------- building blocks
def _linear(in_features: int, out_features: int) -> nn.Linear:
    """Every projection: weight [out, in], no bias (INV-ARCH-370M-008)."""
    return nn.Linear(in_features, out_features, bias=False)


def _embedding_rows(cfg: LlamaConfig) -> int:
    """Rows of the embedding and lm_head: exactly the tokenizer's vocab, never padded."""
    return cfg.vocab_size


def _embedding(rows: int, hidden: int) -> nn.Embedding:
    """Row-major [vocab, hidden] table: row t is token t's vector (INV-ARCH-370M-009)."""
    return nn.Embedding(rows, hidden)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision RMSNorm and RoPE compute in: float32, or the activations' own when wider."""
    return torch.promote_types(dtype, torch.float32)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in (at least) float32 (Zhang and Sennrich
    2019)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(_compute_dtype(dtype))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


def _inv_freq(
    head_dim: int,
    theta: float,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """RoPE inverse frequencies theta ** (-2i / head_dim), i = 0 .. head_dim/2 - 1."""
    exponents = torch.arange(0, head_dim, 2, dtype=dtype, device=device) / head_dim
    return 1.0 / (theta**exponents)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dim (HF's rotate_half)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate dimension pairs (i, i + D/2) of x [B, H, T, D] by position * inv_freq[i]."""
    return x * cos.to(x.dtype) + _rotate_half(x) * sin.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """cos/sin tables [T, head_dim] for positions 0 .. T-1 (Su et al. 2021).

    Computed per forward from (head_dim, theta) rather than held in buffers: the state
    dict stays exactly HF's, and a model built on the meta device needs no repair when
    materialized. The cost is T * head_dim / 2 products once per forward, not per layer.
    Eager even inside torch.compile: compiled, Inductor inlined the cos/sin/pow into every
    layer's rotation and recomputed them per element of q and k, forward and backward
    (7 % of a 370M step on an H200); as the compiled graph's inputs they are read instead.
    """

    def __init__(self, head_dim: int, theta: float, max_positions: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta
        self.max_positions = max_positions

    def inv_freq(
        self, device: torch.device | None = None, dtype: torch.dtype = torch.float32
    ) -> torch.Tensor:
        return _inv_freq(self.head_dim, self.theta, device, dtype)

    @torch.compiler.disable
    def forward(
        self,
        seq_len: int,
        device: torch.device | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [T, head_dim] in ``dtype`` (float32, or float64 for a float64 model)."""
        positions = torch.arange(seq_len, dtype=dtype, device=device)
        freqs = positions[:, None] * self.inv_freq(device, dtype)[None, :]  # [T, D/2]
        angles = torch.cat((freqs, freqs), dim=-1)  # [T, D]: pair (i, i + D/2) shares angle i
        return angles.cos(), angles.sin()

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, theta={self.theta:g}"


def _repeat_kv(x: torch.Tensor, group: int) -> torch.Tensor:
    """[B, n_kv, T, D] -> [B, n_kv * group, T, D]; query head h reads KV head h // group."""
    if group == 1:
        return x
    b, n_kv, t, d = x.shape
    return x[:, :, None].expand(b, n_kv, group, t, d).reshape(b, n_kv * group, t, d)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal scaled dot-product attention (scale 1/sqrt(D)): position i reads keys 0..i."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Attention(nn.Module):
    """Causal grouped-query self-attention (Ainslie et al. 2023)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.resolved_head_dim
        hidden, q_dim, kv_dim = (
            cfg.hidden_size,
            self.num_heads * self.head_dim,
            self.num_kv_heads * self.head_dim,
        )
        self.q_proj = _linear(hidden, q_dim)
        self.k_proj = _linear(hidden, kv_dim)
        self.v_proj = _linear(hidden, kv_dim)
        self.o_proj = _linear(q_dim, hidden)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)  # [B, H(kv), T, D]
        group = self.num_heads // self.num_kv_heads
        k, v = _repeat_kv(k, group), _repeat_kv(v, group)
        y = _attend(q, k, v)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, self.num_heads * self.head_dim))


_mlp_activation = F.silu


def _swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SiLU on the gate branch only (Shazeer 2020)."""
    return _mlp_activation(gate) * up


class MLP(nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)), gate and up kept separate (HF layout)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = _linear(cfg.hidden_size, cfg.intermediate_size)
        self.up_proj = _linear(cfg.hidden_size, cfg.intermediate_size)
        self.down_proj = _linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(_swiglu(self.gate_proj(x), self.up_proj(x)))


class DecoderLayer(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)). Registration order = HF's state-dict order."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    """The decoder stack (HF's LlamaModel, prefix ``model.``): ids -> final-normed hidden."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = _embedding(_embedding_rows(cfg), cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(
            cfg.resolved_head_dim, cfg.rope_theta, cfg.max_position_embeddings
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)  # [B, T, hidden]
        cos, sin = self.rotary_emb(input_ids.shape[1], input_ids.device, _compute_dtype(x.dtype))
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class Llama(nn.Module):
    """LlamaForCausalLM: ``model`` (the stack) and ``lm_head`` (None when tied)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        cfg.validate()
        self.config = cfg
        self.model = LlamaModel(cfg)
        # Tied (HF semantics): no lm_head module at all, so parameters(), the state dict
        # and a weights file hold the table once.
        self.lm_head = (
            None if cfg.tie_word_embeddings else _linear(cfg.hidden_size, _embedding_rows(cfg))
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [B, T] (int) -> logits [B, T, vocab]."""
        if input_ids.dim() != 2 or input_ids.dtype.is_floating_point:
            raise ValueError(
                f"input_ids must be an integer tensor [batch, seq], got {input_ids.dtype} "
                f"of shape {tuple(input_ids.shape)}"
            )
        seq_len, limit = input_ids.shape[1], self.config.max_position_embeddings
        if seq_len > limit:
            raise ValueError(
                f"sequence of {seq_len} tokens exceeds max_position_embeddings {limit}"
            )
        h = self.model(input_ids)
        if self.lm_head is None:
            return F.linear(h, self.model.embed_tokens.weight)
        return self.lm_head(h)


# ---------------------------------------------------------------- construction
def init_weights(model: Llama, generator: torch.Generator | None = None) -> None:
    """Initialize every parameter as the module docstring says; refuses unknown modules."""
    std = INIT_STD
    residual_std = INIT_STD / math.sqrt(2 * model.config.num_hidden_layers)
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, nn.Linear):
                scaled = name.endswith(("o_proj", "down_proj"))
                nn.init.normal_(module.weight, 0.0, residual_std if scaled else std, generator)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, std, generator)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
            elif next(module.parameters(recurse=False), None) is not None:
                raise TypeError(f"no initialization rule for {name} ({type(module).__name__})")


def build_model(
    cfg: LlamaConfig, *, device: str | torch.device = "cpu", seed: int | None = None
) -> Llama:
    """Validate ``cfg``, build the model on ``device`` and initialize it.

    "meta" builds shapes only (no memory, no initialization): for counts and plans.
    Construction happens on meta and is then materialized, so no memory or time goes
    to PyTorch's default initialization that init_weights overwrites anyway.
    """
    cfg.validate()
    device = torch.device(device)
    with torch.device("meta"):
        model = Llama(cfg)
    if device.type == "meta":
        return model
    model = model.to_empty(device=device)
    generator = None if seed is None else torch.Generator(device=device).manual_seed(seed)
    init_weights(model, generator)
    return model
