"""The architecture C-LLAMA-370M-SOVEREIGN contracts, as data, and the check that a config
is exactly that model (contracts/llama-370m-sovereign-v1.yaml).

A config can be a valid Llama and still not be the contracted one: 16 KV heads is fine
for LlamaConfig.problems() but changes k_proj/v_proj and the parameter count, so it is
refused here. No torch.

    deviations(preset("370m"))   # [] - the preset is the contract
"""

from __future__ import annotations

from trainer.model.config import ArchProblem, LlamaConfig
from trainer.model.params import param_count, tensor_count

CONTRACT_ID = "C-LLAMA-370M-SOVEREIGN"
PARAMETERS = 373_509_120  # INV-ARCH-370M-001, arithmetic in the contract's header
PARAMETER_BAND = (366_000_000, 374_000_000)  # the coarse statement; excludes tied 322,045,952
TENSORS = 219  # 9 per layer * 24 + embed_tokens + norm + lm_head

ARCHITECTURE: dict[str, object] = {
    "vocab_size": 50257,
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


def deviations(cfg: LlamaConfig) -> list[ArchProblem]:
    """Every way ``cfg`` differs from the contracted architecture (empty: it is the model)."""
    problems = []
    for name, wanted in ARCHITECTURE.items():
        value = cfg.resolved_head_dim if name == "head_dim" else getattr(cfg, name)
        if value != wanted:
            problems.append(
                ArchProblem(
                    name,
                    f"{value!r} differs from {CONTRACT_ID}'s {wanted!r}",
                    f"set {name} to {wanted!r} or use the 370m preset",
                )
            )
    if cfg.problems():
        return problems  # counts of an invalid config mean nothing
    count, low_high = param_count(cfg), PARAMETER_BAND
    if count != PARAMETERS:
        where = "inside" if low_high[0] <= count <= low_high[1] else "outside"
        problems.append(
            ArchProblem(
                "parameters",
                f"{count:,} parameters, not {PARAMETERS:,} ({where} the band "
                f"[{low_high[0]:,}, {low_high[1]:,}])",
                "the fields above change the count",
            )
        )
    if tensor_count(cfg) != TENSORS:
        problems.append(
            ArchProblem(
                "tensors",
                f"{tensor_count(cfg)} tensors, not {TENSORS}",
                "a tied lm_head stores 218",
            )
        )
    return problems
