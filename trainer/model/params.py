"""Tensor names, shapes and counts of a LlamaConfig, computed without building the model.

No torch: `trainer plan` sizes memory and checkpoints from these. Names and order are
those of transformers.LlamaForCausalLM's state dict; a tied model stores no lm_head (HF
semantics). Tests check every number here against the built module (sum of numel,
len(state_dict)). Contract: C-LLAMA-370M-SOVEREIGN, INV-ARCH-370M-001 (373,509,120
parameters in 219 tensors for the 370m preset).
"""

from __future__ import annotations

from math import prod

from trainer.model.config import LlamaConfig


def layer_shapes(cfg: LlamaConfig, i: int) -> dict[str, tuple[int, ...]]:
    """Shapes of decoder layer ``i``, in registration order (attention, MLP, norms)."""
    hidden, inner = cfg.hidden_size, cfg.intermediate_size
    q_dim = cfg.num_attention_heads * cfg.resolved_head_dim
    kv_dim = cfg.num_key_value_heads * cfg.resolved_head_dim
    prefix = f"model.layers.{i}."
    return {
        prefix + "self_attn.q_proj.weight": (q_dim, hidden),  # nn.Linear: [out, in]
        prefix + "self_attn.k_proj.weight": (kv_dim, hidden),
        prefix + "self_attn.v_proj.weight": (kv_dim, hidden),
        prefix + "self_attn.o_proj.weight": (hidden, q_dim),
        prefix + "mlp.gate_proj.weight": (inner, hidden),
        prefix + "mlp.up_proj.weight": (inner, hidden),
        prefix + "mlp.down_proj.weight": (hidden, inner),
        prefix + "input_layernorm.weight": (hidden,),
        prefix + "post_attention_layernorm.weight": (hidden,),
    }


def parameter_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every stored tensor's HF name → shape, in state-dict order."""
    shapes: dict[str, tuple[int, ...]] = {
        "model.embed_tokens.weight": (cfg.vocab_size, cfg.hidden_size)  # row t = token t
    }
    for i in range(cfg.num_hidden_layers):
        shapes.update(layer_shapes(cfg, i))
    shapes["model.norm.weight"] = (cfg.hidden_size,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, cfg.hidden_size)
    return shapes


def param_count(cfg: LlamaConfig) -> int:
    """Trainable parameters (a tied lm_head is the embedding, counted once)."""
    return sum(prod(shape) for shape in parameter_shapes(cfg).values())


def tensor_count(cfg: LlamaConfig) -> int:
    """Tensors in the state dict and in a weights file: 9 per layer + embed + norm (+ lm_head)."""
    return len(parameter_shapes(cfg))
