"""The Llama architecture as a frozen dataclass, its validity rules, and the named presets.

No torch here: `trainer validate` checks configs without importing it. Field names are
those of transformers.LlamaConfig, so a config maps one to one onto an HF config.json.
Contract: C-LLAMA-370M-SOVEREIGN (contracts/llama-370m-sovereign-v1.yaml); the "370m"
preset is its architecture (INV-ARCH-370M-002/003/005: heads tile hidden, GQA groups,
RoPE over an even head_dim).

    cfg = preset("tiny")                                   # CPU tests
    cfg = dataclasses.replace(preset("tiny"), vocab_size=8192)
    cfg.validate()                                         # ModelConfigError lists every problem
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields

INIT_STD = 0.02  # N(0, 0.02) initialization (GPT-2; HF's initializer_range); see llama.py


@dataclass(frozen=True)
class ArchProblem:
    """One broken architecture rule: the field to change, what is wrong, how to fix it."""

    field: str
    message: str
    hint: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message} ({self.hint})"


class ModelConfigError(ValueError):
    """A LlamaConfig breaks one or more rules; ``.problems`` holds all of them."""

    def __init__(self, problems: list[ArchProblem]) -> None:
        self.problems = list(problems)
        super().__init__(
            "invalid model architecture:\n" + "\n".join(f"  {p}" for p in self.problems)
        )


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int  # embedding rows == tokenizer vocab, specials included; never padded
    hidden_size: int  # width of the residual stream
    intermediate_size: int  # SwiGLU inner width (gate_proj and up_proj each)
    num_hidden_layers: int
    num_attention_heads: int  # query heads
    num_key_value_heads: int  # key/value heads; query head h reads KV head h // group
    head_dim: int | None = None  # None: hidden_size // num_attention_heads, remainder checked
    max_position_embeddings: int = 2048  # longest sequence (tokens) the model accepts
    rope_theta: float = 10000.0  # RoPE base wavelength
    rms_norm_eps: float = 1e-5  # added to the mean square inside each RMSNorm
    tie_word_embeddings: bool = False  # True: logits use embed_tokens.weight, no lm_head

    @property
    def resolved_head_dim(self) -> int:
        if self.head_dim is not None:
            return self.head_dim
        return self.hidden_size // self.num_attention_heads if self.num_attention_heads else 0

    @property
    def kv_group_size(self) -> int:
        """Query heads per KV head."""
        return self.num_attention_heads // self.num_key_value_heads

    def problems(self) -> list[ArchProblem]:
        """Every broken rule (empty when valid); sizes first, since later rules divide by them."""
        found = list(_check_types(self))
        if found:
            return found
        found = list(_check_sizes(self))
        if any(p.field in _DIVISORS for p in found):
            return found
        # Looked up at call time, so a mutant (tests/mutants/model.py) can patch one rule.
        for check in (_check_head_tiling, _check_gqa, _check_rope):
            found.extend(check(self))
        return found

    def validate(self) -> None:
        problems = self.problems()
        if problems:
            raise ModelConfigError(problems)


# ---------------------------------------------------------------- rules
# One pure checker per rule, each yielding problems (jsonschema style); problems() runs them.
_POSITIVE_INTS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "max_position_embeddings",
)
_DIVISORS = ("num_attention_heads", "num_key_value_heads", "head_dim")


def _check_types(cfg: LlamaConfig) -> Iterator[ArchProblem]:
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if f.name in _POSITIVE_INTS or (f.name == "head_dim" and value is not None):
            if isinstance(value, bool) or not isinstance(value, int):
                yield ArchProblem(
                    f.name, f"must be an integer, got {value!r}", "write a whole number"
                )
        elif f.name in ("rope_theta", "rms_norm_eps"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                yield ArchProblem(f.name, f"must be a number, got {value!r}", "write a number")
        elif f.name == "tie_word_embeddings" and not isinstance(value, bool):
            yield ArchProblem(f.name, f"must be true or false, got {value!r}", "write a boolean")


def _check_sizes(cfg: LlamaConfig) -> Iterator[ArchProblem]:
    for name in _POSITIVE_INTS:
        value = getattr(cfg, name)
        if value <= 0:
            yield ArchProblem(name, f"must be > 0, got {value}", f"set {name} to a positive size")
    if cfg.head_dim is not None and cfg.head_dim <= 0:
        yield ArchProblem(
            "head_dim", f"must be > 0, got {cfg.head_dim}", "leave head_dim unset or make it > 0"
        )
    if not cfg.rms_norm_eps > 0:
        yield ArchProblem(
            "rms_norm_eps", f"must be > 0, got {cfg.rms_norm_eps}", "use 1e-5 (Llama 2) or 1e-6"
        )
    if not cfg.rope_theta > 0:
        yield ArchProblem("rope_theta", f"must be > 0, got {cfg.rope_theta}", "use 10000")


def _check_head_tiling(cfg: LlamaConfig) -> Iterator[ArchProblem]:
    """INV-ARCH-370M-002: heads * head_dim == hidden; a derived head_dim must divide exactly."""
    heads, hidden = cfg.num_attention_heads, cfg.hidden_size
    if cfg.head_dim is None and hidden % heads:
        yield ArchProblem(
            "num_attention_heads",
            f"hidden_size {hidden} is not divisible by num_attention_heads {heads} "
            f"(head_dim would be {hidden / heads:g}; {hidden % heads} features would be dropped)",
            f"choose heads dividing {hidden} or set hidden_size to a multiple of {heads}",
        )
        return
    head_dim = cfg.resolved_head_dim
    if heads * head_dim != hidden:
        yield ArchProblem(
            "head_dim",
            f"num_attention_heads {heads} * head_dim {head_dim} = {heads * head_dim} "
            f"!= hidden_size {hidden}",
            f"set head_dim to {hidden // heads} or hidden_size to {heads * head_dim}"
            if hidden % heads == 0
            else f"set hidden_size to {heads * head_dim}",
        )


def _check_gqa(cfg: LlamaConfig) -> Iterator[ArchProblem]:
    """INV-ARCH-370M-003: KV heads divide the query heads."""
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    if heads % kv:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0]
        yield ArchProblem(
            "num_key_value_heads",
            f"num_attention_heads {heads} is not divisible by num_key_value_heads {kv}",
            f"use one of {divisors}",
        )


def _check_rope(cfg: LlamaConfig) -> Iterator[ArchProblem]:
    """RoPE rotates dimension pairs (i, i + head_dim/2): head_dim must be even."""
    head_dim = cfg.resolved_head_dim
    if head_dim % 2:
        yield ArchProblem(
            "head_dim",
            f"head_dim {head_dim} is odd; rotary embeddings rotate pairs of dimensions",
            "choose an even head_dim (hidden_size / num_attention_heads)",
        )


# ---------------------------------------------------------------- presets
PRESETS: dict[str, LlamaConfig] = {
    # Milliseconds per forward/backward on CPU; 158,016 parameters.
    "tiny": LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    ),
    # The 370m family scaled down (same tokenizer, 4:1 GQA, head_dim 48, MLP 2.67x):
    # 50,990,208 parameters, 75 % of them in the two 50257-row tables.
    "50m": LlamaConfig(
        vocab_size=50257,
        hidden_size=384,
        intermediate_size=1024,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=1024,
    ),
    # C-LLAMA-370M-SOVEREIGN: 373,509,120 parameters in 219 tensors. Context 1024 is the
    # source system's trained seq_len (its 2048 run ran out of memory on a 24 GB card);
    # RoPE itself is defined for any position.
    "370m": LlamaConfig(
        vocab_size=50257,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=24,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=1024,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    ),
}


def preset(name: str) -> LlamaConfig:
    """The named preset; an unknown name is an error listing the presets."""
    if name not in PRESETS:
        raise ModelConfigError(
            [ArchProblem("preset", f"unknown preset {name!r}", f"use one of {', '.join(PRESETS)}")]
        )
    return PRESETS[name]
