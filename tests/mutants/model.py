"""Known bugs of the Llama model (C-LLAMA-370M-SOVEREIGN's mutants), injected by `gates audit`.

Each patches one named seam of trainer/model (see the llama.py docstring), so the rest of
the model is the real code. rope-interleaved-pairs and rms-norm-eps-wrong belong to
FALSIFY-ARCH-370M-012 (still planned); the HF parity test already kills them.
"""

import dataclasses

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from gates.mutants import mutant
from trainer.checkpoint.export import ExportError
from trainer.model import config, hf, llama, vocab


@mutant("lm-head-tied")
def _lm_head_tied(patch):
    real = llama.build_model

    def tied_build(cfg, **kwargs):
        model = real(cfg, **kwargs)
        if model.lm_head is not None:
            model.lm_head.weight = model.model.embed_tokens.weight
        return model

    patch.setattr(llama, "build_model", tied_build)


@mutant("kv-heads-equal-heads")
def _kv_heads_equal_heads(patch):
    real = llama.Attention.__init__

    def multi_head_init(self, cfg):
        real(self, dataclasses.replace(cfg, num_key_value_heads=cfg.num_attention_heads))

    patch.setattr(llama.Attention, "__init__", multi_head_init)


@mutant("bias-added")
def _bias_added(patch):
    patch.setattr(
        llama,
        "_linear",
        lambda in_features, out_features: nn.Linear(in_features, out_features, bias=True),
    )


def _rows_mutant(patch, rows):
    patch.setattr(llama, "_embedding_rows", lambda cfg: rows(cfg.vocab_size))


@mutant("vocab-padded-to-multiple-of-64")
def _vocab_padded(patch):
    _rows_mutant(patch, lambda v: -(-v // 64) * 64)


@mutant("vocab-off-by-one")
def _vocab_off_by_one(patch):
    _rows_mutant(patch, lambda v: v - 1)


@mutant("vocab-check-uses-le")
def _vocab_check_le(patch):
    patch.setattr(
        vocab,
        "_vocab_sizes_agree",
        lambda model_vocab_size, tokenizer_vocab_size: tokenizer_vocab_size <= model_vocab_size,
    )


@mutant("head-dim-derived-by-floor")
def _head_dim_floor(patch):
    real = config._check_head_tiling

    def tiling_unchecked_when_derived(cfg):
        if cfg.head_dim is not None:  # only an explicit head_dim is checked
            yield from real(cfg)

    patch.setattr(config, "_check_head_tiling", tiling_unchecked_when_derived)


@mutant("kv-repeat-interleaved-wrong")
def _kv_tiled(patch):
    def tiled(x, group):  # query head h reads KV head h % n_kv
        return x.repeat(1, group, 1, 1)

    patch.setattr(llama, "_repeat_kv", tiled)


@mutant("rope-theta-wrong")
def _rope_theta_wrong(patch):
    real = llama._inv_freq
    patch.setattr(
        llama,
        "_inv_freq",
        lambda head_dim, theta, device=None, dtype=torch.float32: real(
            head_dim, 500000.0, device, dtype
        ),
    )


@mutant("rope-partial-rotary")
def _rope_partial(patch):
    real = llama._apply_rope

    def first_half_only(x, cos, sin):
        half = x.shape[-1] // 2
        return torch.cat((real(x, cos, sin)[..., :half], x[..., half:]), dim=-1)

    patch.setattr(llama, "_apply_rope", first_half_only)


@mutant("rope-interleaved-pairs")
def _rope_interleaved(patch):
    def rotate_adjacent_pairs(x):  # (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)
        return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)

    patch.setattr(llama, "_rotate_half", rotate_adjacent_pairs)


@mutant("rms-norm-eps-wrong")
def _rms_eps(patch):
    real = llama.RMSNorm.__init__
    patch.setattr(llama.RMSNorm, "__init__", lambda self, dim, eps: real(self, dim, 1e-6))


@mutant("rmsnorm-uses-variance")
def _rms_variance(patch):
    # Divides by the variance (mean-subtracted) instead of the mean square: a LayerNorm
    # denominator with RMSNorm's numerator. No function-level seam, so forward is replaced
    # by the real one with that single change (same dtype handling).
    def variance_forward(self, x):
        dtype = x.dtype
        h = x.to(llama._compute_dtype(dtype))
        h = h * torch.rsqrt(h.var(-1, keepdim=True, unbiased=False) + self.eps)
        return self.weight * h.to(dtype)

    patch.setattr(llama.RMSNorm, "forward", variance_forward)


@mutant("fused-gate-up")
def _fused_gate_up(patch):
    class FusedMLP(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.gate_up_proj = llama._linear(cfg.hidden_size, 2 * cfg.intermediate_size)
            self.down_proj = llama._linear(cfg.intermediate_size, cfg.hidden_size)

        def forward(self, x):
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(llama._swiglu(gate, up))

    patch.setattr(llama, "MLP", FusedMLP)


@mutant("silu-on-up-branch")
def _silu_on_up(patch):
    patch.setattr(llama, "_swiglu", lambda gate, up: gate * F.silu(up))


@mutant("gelu-instead-of-silu")
def _gelu(patch):
    patch.setattr(llama, "_mlp_activation", F.gelu)


@mutant("layernorm-instead-of-rmsnorm")
def _layernorm(patch):
    class LayerNormAsRMSNorm(nn.LayerNorm):  # weight and bias, mean-centred
        def __init__(self, dim, eps):
            super().__init__(dim, eps=eps)

    patch.setattr(llama, "RMSNorm", LayerNormAsRMSNorm)


@mutant("embedding-transposed")
def _embedding_transposed(patch):
    class TransposedEmbedding(nn.Embedding):  # table [hidden, vocab], looked up by column
        def __init__(self, rows, hidden):
            super().__init__(hidden, rows)

        def forward(self, ids):
            return F.embedding(ids, self.weight.t())

    patch.setattr(llama, "_embedding", TransposedEmbedding)


@mutant("embedding-saved-as-transposed-view")
def _embedding_saved_transposed(patch):
    real = hf._tensors_for_file

    def column_major_embedding(model):
        tensors = real(model)
        w = tensors["model.embed_tokens.weight"]
        # The bytes of w.T, under a header that still says [vocab, hidden].
        tensors["model.embed_tokens.weight"] = w.t().contiguous().view(w.shape)
        return tensors

    patch.setattr(hf, "_tensors_for_file", column_major_embedding)


# The exporter refusing the incomplete state dict (ExportError: it names the missing
# tensors) is how FALSIFY-ARCH-370M-013 sees these two bugs: its test turns that refusal
# into pytest.fail, which without refused_with would read as a crash.
@mutant("lm-head-dropped-on-save", refused_with=(ExportError,))
def _lm_head_dropped(patch):
    real = hf._tensors_for_file

    def without_lm_head(model):
        tensors = real(model)
        tensors.pop("lm_head.weight", None)
        return tensors

    patch.setattr(hf, "_tensors_for_file", without_lm_head)


@mutant("tie-flag-true-in-export-config")
def _tie_flag_true(patch):
    real = hf.hf_config_dict
    patch.setattr(
        hf, "hf_config_dict", lambda cfg, **kw: {**real(cfg, **kw), "tie_word_embeddings": True}
    )


@mutant("export-of-empty-state-dict", refused_with=(ExportError,))
def _empty_export(patch):
    patch.setattr(hf, "_tensors_for_file", lambda model: {})
