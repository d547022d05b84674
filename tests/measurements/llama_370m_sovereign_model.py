"""Measurements of C-LLAMA-370M-SOVEREIGN's gates (contracts/llama-370m-sovereign-v1.yaml).

Each re-checks the real code: the 370m model is built from preset("370m") on the meta
device (shapes, names, counts; no memory), and numerics run on CPU on a narrow model of
the same family (16 query heads over 4 KV heads, vocab 50257, theta 10000, untied) whose
width makes them take milliseconds. Expected values are the contract's, written here,
never read back from the code. torch is imported inside the functions: every
measurement module is imported whenever any gate is looked up.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

from gates.measure import GateContext, Measurement, measures

PARAMETERS = 373_509_120
BAND = (366_000_000, 374_000_000)
TENSORS = 219
VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INNER = 50257, 1024, 24, 16, 4, 64, 2816
MISMATCHED_MODEL_VOCABS = (50256, 50258, 50304)  # FALSIFY-ARCH-370M-006
GAP_ID = 1234  # the id missing from the gapped tokenizer (highest id 50257)
HF_REFERENCE_IDS = (2, 64, 12)  # sequences, tokens each, seed of the ids
MODEL_SOURCES = ("config.py", "params.py", "llama.py", "hf.py", "vocab.py", "sovereign.py")


def _sources(root: Path) -> list[Path]:
    return [root / "trainer" / "model" / name for name in MODEL_SOURCES]


def _narrow(cfg):
    """Same family as ``cfg`` (heads, KV heads, vocab, theta, eps, untied), 128 wide."""
    return dataclasses.replace(
        cfg, hidden_size=128, head_dim=8, intermediate_size=352, num_hidden_layers=2
    )


# ---------------------------------------------------------------- the nine invariants
# Each returns the violations it found (empty: the invariant holds).
def _inv_001_parameter_count(meta, cfg, small) -> list[str]:
    from trainer.model import param_count, tensor_count  # noqa: PLC0415

    found = []
    by_parameters = sum(p.numel() for p in meta.parameters())
    by_name = sum(t.numel() for t in meta.state_dict().values())
    for what, n in (("parameters()", by_parameters), ("state dict", by_name)):
        if n != PARAMETERS:
            found.append(f"{what} holds {n:,}, not {PARAMETERS:,}")
        if not BAND[0] <= n <= BAND[1]:
            found.append(f"{what} holds {n:,}, outside [{BAND[0]:,}, {BAND[1]:,}]")
    if (param_count(cfg), tensor_count(cfg)) != (PARAMETERS, TENSORS):
        found.append(f"analytic count {param_count(cfg):,} in {tensor_count(cfg)} tensors")
    return found


def _inv_002_heads_tile_hidden(meta, cfg, small) -> list[str]:
    from trainer.model import ModelConfigError  # noqa: PLC0415

    found = []
    if cfg.num_attention_heads * cfg.resolved_head_dim != HIDDEN:
        found.append(f"{cfg.num_attention_heads} heads * {cfg.resolved_head_dim} != {HIDDEN}")
    for i, layer in enumerate(meta.model.layers):
        for proj in (layer.self_attn.q_proj, layer.self_attn.o_proj):
            if tuple(proj.weight.shape) != (HIDDEN, HIDDEN):
                found.append(f"layer {i}: q/o_proj {tuple(proj.weight.shape)}")
    for broken in (
        dataclasses.replace(cfg, hidden_size=1000, head_dim=None),
        dataclasses.replace(cfg, hidden_size=1000),
        dataclasses.replace(cfg, head_dim=60),
    ):
        try:
            broken.validate()
            found.append(f"accepted hidden {broken.hidden_size}, head_dim {broken.head_dim}")
        except ModelConfigError:
            pass
    return found


def _reference_attention(attn, x, heads: int, kv_heads: int, theta: float):
    """Per query head h in float64, reading KV head h // (heads / kv_heads)."""
    import torch  # noqa: PLC0415

    b, t, _ = x.shape
    d = attn.q_proj.weight.shape[0] // heads
    xd = x.double()
    q = (xd @ attn.q_proj.weight.double().T).view(b, t, heads, d)
    k = (xd @ attn.k_proj.weight.double().T).view(b, t, kv_heads, d)
    v = (xd @ attn.v_proj.weight.double().T).view(b, t, kv_heads, d)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * (
        theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    )
    cos, sin = angle.cos()[None, :, None, :], angle.sin()[None, :, None, :]

    def rope(z):
        z1, z2 = z[..., : d // 2], z[..., d // 2 :]
        return torch.cat((z1 * cos - z2 * sin, z2 * cos + z1 * sin), dim=-1)

    q, k = rope(q), rope(k)
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    out = torch.zeros(b, t, heads, d, dtype=torch.float64)
    for h in range(heads):
        g = h // (heads // kv_heads)
        scores = torch.einsum("bqd,bkd->bqk", q[:, :, h], k[:, :, g]) / math.sqrt(d)
        out[:, :, h] = scores.masked_fill(future, float("-inf")).softmax(-1) @ v[:, :, g]
    return out.reshape(b, t, heads * d) @ attn.o_proj.weight.double().T


def _inv_003_grouped_query_attention(meta, cfg, small) -> list[str]:
    import torch  # noqa: PLC0415

    from trainer.model import ModelConfigError  # noqa: PLC0415
    from trainer.model.sovereign import deviations  # noqa: PLC0415

    found = []
    if cfg.num_attention_heads % cfg.num_key_value_heads or cfg.num_key_value_heads != KV_HEADS:
        found.append(f"{cfg.num_attention_heads} heads over {cfg.num_key_value_heads} KV heads")
    for i, layer in enumerate(meta.model.layers):
        for proj in (layer.self_attn.k_proj, layer.self_attn.v_proj):
            if tuple(proj.weight.shape) != (KV_HEADS * HEAD_DIM, HIDDEN):
                found.append(f"layer {i}: k/v_proj {tuple(proj.weight.shape)}")
    try:
        dataclasses.replace(cfg, num_key_value_heads=3).validate()
        found.append("accepted 3 KV heads for 16 heads")
    except ModelConfigError:
        pass
    if not deviations(dataclasses.replace(cfg, num_key_value_heads=16)):
        found.append("accepted 16 KV heads as the contracted model")
    attn = small.model.layers[0].self_attn
    x = torch.randn(2, 12, small.config.hidden_size, generator=torch.Generator().manual_seed(3))
    cos, sin = small.model.rotary_emb(12)
    with torch.no_grad():
        ours = attn(x, cos, sin).double()
    reference = _reference_attention(attn, x, HEADS, KV_HEADS, 10000.0)
    diff = (ours - reference).abs().max().item()
    if not diff <= 1e-6:
        found.append(f"attention differs from the h // 4 reference by {diff:.3g}")
    return found


def _inv_004_lm_head_untied(meta, cfg, small) -> list[str]:
    from trainer.model import tensor_count  # noqa: PLC0415
    from trainer.model.hf import hf_config_dict, save_weights  # noqa: PLC0415

    found = []
    if cfg.tie_word_embeddings or meta.lm_head is None:
        return ["the 370m model has no lm_head of its own"]
    if meta.lm_head.weight is meta.model.embed_tokens.weight:
        found.append("lm_head.weight is the embedding Parameter")
    embed, lm_head = small.model.embed_tokens.weight, small.lm_head.weight
    if lm_head.untyped_storage().data_ptr() == embed.untyped_storage().data_ptr():
        found.append("lm_head.weight shares storage with the embedding")
    if tensor_count(cfg) != TENSORS or "lm_head.weight" not in meta.state_dict():
        found.append(f"{tensor_count(cfg)} tensors, lm_head.weight not among them")
    if hf_config_dict(cfg)["tie_word_embeddings"] is not False:
        found.append("the exported config.json says tie_word_embeddings true")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        try:
            save_weights(small, path)
            names = _file_names(path)
            if "lm_head.weight" not in names:
                found.append(f"the weights file of {len(names)} tensors lacks lm_head.weight")
        except ValueError as exc:
            found.append(f"save refused: {exc}")
    return found


def _inv_005_rope(meta, cfg, small) -> list[str]:
    import torch  # noqa: PLC0415

    from trainer.model import llama  # noqa: PLC0415

    found = []
    rotary = meta.model.rotary_emb
    if (rotary.head_dim, rotary.theta) != (HEAD_DIM, 10000.0):
        found.append(f"rotary over head_dim {rotary.head_dim}, theta {rotary.theta}")
    closed = torch.tensor([10000.0 ** (-2 * i / 64) for i in range(32)], dtype=torch.float64)
    inv_freq = rotary.inv_freq().double()
    if inv_freq.shape != closed.shape or ((inv_freq - closed).abs() / closed).max() > 1e-7:
        found.append("inverse frequencies are not 10000 ** (-2i / 64)")
        return found
    cos, sin = rotary(64)
    x = torch.randn(1, 1, 64, HEAD_DIM, generator=torch.Generator().manual_seed(5))
    rotated = llama._apply_rope(x, cos, sin).double()
    angle = torch.arange(64, dtype=torch.float64)[:, None] * closed[None, :]
    c, s = angle.cos(), angle.sin()
    x1, x2 = x.double()[..., :32], x.double()[..., 32:]
    expected = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    off = ((rotated - expected).abs() > 1e-5).any(dim=(0, 1, 2)).nonzero().flatten().tolist()
    if off:
        found.append(f"dimensions {off[:8]} are not rotated by position * inv_freq")
    return found


def _inv_006_vocab(meta, cfg, small) -> list[str]:
    from trainer.model import VocabMismatchError, check_vocab_agreement  # noqa: PLC0415

    found = []
    for table in ("model.embed_tokens.weight", "lm_head.weight"):
        rows = meta.state_dict()[table].shape[0]
        if rows != VOCAB:
            found.append(f"{table} has {rows} rows, the tokenizer {VOCAB}")
    try:
        check_vocab_agreement(cfg.vocab_size, VOCAB)
    except VocabMismatchError as exc:
        found.append(f"the contracted pair is refused: {exc}")
    for model_vocab in MISMATCHED_MODEL_VOCABS:
        try:
            check_vocab_agreement(model_vocab, VOCAB)
            found.append(f"model {model_vocab} accepted with tokenizer {VOCAB}")
        except VocabMismatchError:
            pass
    return found


def _inv_007_swiglu(meta, cfg, small) -> list[str]:
    import torch  # noqa: PLC0415

    found = []
    contracted = {
        "gate_proj.weight": (INNER, HIDDEN),
        "up_proj.weight": (INNER, HIDDEN),
        "down_proj.weight": (HIDDEN, INNER),
    }
    for i, layer in enumerate(meta.model.layers):
        shapes = {n: tuple(p.shape) for n, p in layer.mlp.named_parameters()}
        if shapes != contracted:
            found.append(f"layer {i} MLP tensors {shapes}")
    mlp = small.model.layers[0].mlp
    x = torch.randn(2, 5, small.config.hidden_size, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        ours = mlp(x).double()
    xd = x.double()
    gate = xd @ mlp.gate_proj.weight.double().T
    up = xd @ mlp.up_proj.weight.double().T
    by_hand = (gate / (1.0 + torch.exp(-gate)) * up) @ mlp.down_proj.weight.double().T
    diff = (ours - by_hand).abs().max().item()
    if not diff <= 1e-6:
        found.append(f"mlp(x) differs from down(silu(gate(x)) * up(x)) by {diff:.3g}")
    return found


def _inv_008_no_biases(meta, cfg, small) -> list[str]:
    from torch import nn  # noqa: PLC0415

    from trainer.model.hf import save_weights  # noqa: PLC0415

    found = [
        f"{name} has a bias"
        for name, m in meta.named_modules()
        if isinstance(m, nn.Linear) and m.bias is not None
    ]
    norms = [meta.model.norm] + [
        n
        for layer in meta.model.layers
        for n in (layer.input_layernorm, layer.post_attention_layernorm)
    ]
    found += [
        f"a norm holds {names}"
        for names in ([n for n, _ in norm.named_parameters()] for norm in norms)
        if names != ["weight"]
    ]
    found += [f"state dict name {n}" for n in meta.state_dict() if n.endswith(".bias")]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        try:
            save_weights(small, path)
            found += [f"file tensor {n}" for n in _file_names(path) if n.endswith(".bias")]
        except ValueError as exc:
            found.append(f"save refused: {exc}")
    return found


def _inv_009_row_major_embedding(meta, cfg, small) -> list[str]:
    import torch  # noqa: PLC0415
    from safetensors import safe_open  # noqa: PLC0415

    from trainer.model.hf import save_weights  # noqa: PLC0415

    found = []
    weight = meta.model.embed_tokens.weight
    if tuple(weight.shape) != (VOCAB, HIDDEN) or weight.stride() != (HIDDEN, 1):
        found.append(f"embedding {tuple(weight.shape)} with strides {weight.stride()}")
    if meta.lm_head is not None and tuple(meta.lm_head.weight.shape) != (VOCAB, HIDDEN):
        found.append(f"lm_head {tuple(meta.lm_head.weight.shape)}")
    table = small.model.embed_tokens.weight
    ids = torch.randint(0, VOCAB, (4, 33), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        if not torch.equal(small.model.embed_tokens(ids), table[ids]):
            found.append("embedding(ids) != weight[ids]")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        try:
            save_weights(small, path)
            with safe_open(str(path), framework="pt", device="cpu") as fh:
                stored = fh.get_tensor("model.embed_tokens.weight")
            if stored.stride() != (table.shape[1], 1) or not torch.equal(stored, table.detach()):
                found.append("the embedding on disk is not the row-major table")
        except (ValueError, KeyError) as exc:
            found.append(f"saved embedding unreadable: {exc}")
    return found


INVARIANTS: dict[str, Callable] = {
    "INV-ARCH-370M-001": _inv_001_parameter_count,
    "INV-ARCH-370M-002": _inv_002_heads_tile_hidden,
    "INV-ARCH-370M-003": _inv_003_grouped_query_attention,
    "INV-ARCH-370M-004": _inv_004_lm_head_untied,
    "INV-ARCH-370M-005": _inv_005_rope,
    "INV-ARCH-370M-006": _inv_006_vocab,
    "INV-ARCH-370M-007": _inv_007_swiglu,
    "INV-ARCH-370M-008": _inv_008_no_biases,
    "INV-ARCH-370M-009": _inv_009_row_major_embedding,
}


def _file_names(path: Path) -> list[str]:
    with path.open("rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        return [n for n in json.loads(fh.read(size)) if n != "__metadata__"]


def _hf_reference_error(small) -> tuple[float, str]:
    """max |logits_ours - logits_hf| / max |logits_hf| of the narrow model against
    transformers' LlamaForCausalLM (eager attention) of hf_config_dict(its config) holding
    its state dict, both in float64, on seeded ids; inf and the reason when HF's model
    cannot hold ours. None of the nine invariants covers the computation itself (RMSNorm's
    formula, the residual wiring, the final norm), so this is a value of its own.

    HF computes RMSNorm (cast to float32), the RoPE tables and the eager softmax in float32
    whatever the model's dtype, so the agreement is float32 rounding (u = 2**-24 = 6e-8),
    not float64's: 9.7e-8 here (7.7e-16 with those three steps made float64). The gate's
    bound, 1e-6, is about 17 u; RMSNorm over the variance gives 3.2e-2, eps 1e-6 1.4e-2."""
    import copy  # noqa: PLC0415

    import torch  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    from trainer.model.hf import hf_config_dict  # noqa: PLC0415

    ours = copy.deepcopy(small).to(torch.float64).eval()
    config = transformers.LlamaConfig(**hf_config_dict(ours.config, dtype="float64"))
    config._attn_implementation = "eager"  # HF's own attention math, not torch's SDPA
    with torch.random.fork_rng(devices=[]):  # HF's random init leaves the global RNG alone
        theirs = transformers.LlamaForCausalLM(config).to(torch.float64).eval()
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    tied_head = ["lm_head.weight"] if ours.config.tie_word_embeddings else []
    if unexpected or sorted(missing) != tied_head:
        return math.inf, f"HF's model is not ours: missing {missing}, unexpected {unexpected}"
    n, length, seed = HF_REFERENCE_IDS
    ids = torch.randint(
        0, ours.config.vocab_size, (n, length), generator=torch.Generator().manual_seed(seed)
    )
    with torch.no_grad():
        mine, reference = ours(ids), theirs(input_ids=ids, use_cache=False).logits
    return ((mine - reference).abs().max() / reference.abs().max()).item(), ""


@measures("GATE-ARCH-370M-001")
def architecture_invariants(ctx: GateContext) -> Measurement:
    from trainer.model import preset  # noqa: PLC0415
    from trainer.model.llama import build_model  # noqa: PLC0415

    cfg = preset("370m")
    meta = build_model(cfg, device="meta")
    small = build_model(_narrow(cfg), seed=0)
    violations: dict[str, list[str]] = {}
    for inv_id, check in INVARIANTS.items():
        try:
            found = check(meta, cfg, small)
        except Exception as exc:  # a check that cannot run is a violation, with the reason
            found = [f"check failed to run: {type(exc).__name__}: {exc}"]
        if found:
            violations[inv_id] = found
    try:
        hf_error, hf_why = _hf_reference_error(small)
    except Exception as exc:  # a reference that cannot run fails the bound, with the reason
        hf_error, hf_why = math.inf, f"failed to run: {type(exc).__name__}: {exc}"
    import transformers  # noqa: PLC0415 - for its version; _hf_reference_error imported it

    n, length, seed = HF_REFERENCE_IDS
    return Measurement(
        values={
            "architecture_invariant_violations": (len(violations), "invariants"),
            "invariants_checked": (len(INVARIANTS), "invariants"),
            "hf_reference_logit_relative_error": (hf_error, "ratio"),
        },
        workload="the nine INV-ARCH-370M invariants re-checked on build_model(preset('370m')) "
        "on the meta device (shapes, names, counts, config refusals, vocab pairs) and, for "
        "numerics (GQA vs a per-head float64 reference, RoPE, SwiGLU, lookup, weights file), "
        "on CPU on the same family 128 wide, 2 layers (seed 0); and that narrow model's "
        "logits in float64 against transformers "
        f"{transformers.__version__} LlamaForCausalLM (eager attention, float64) built from "
        f"hf_config_dict and holding its state dict, on {n} sequences of {length} ids "
        f"(seed {seed}): max |diff| / max |HF logit|",
        inputs=_sources(ctx.root),
        parameters={
            "narrow_model": dataclasses.asdict(_narrow(cfg)),
            "hf_reference": {
                "transformers": transformers.__version__,
                "attn_implementation": "eager",
                "dtype": "float64",
                "sequences": n,
                "tokens": length,
                "ids_seed": seed,
            },
        },
        notes="; ".join(
            [f"{k}: {' | '.join(v)}" for k, v in violations.items()]
            + [f"HF reference: {hf_why}"] * bool(hf_why)
        ),
    )


@measures("GATE-ARCH-370M-003")
def parameter_count(ctx: GateContext) -> Measurement:
    from trainer.model import preset  # noqa: PLC0415
    from trainer.model.llama import build_model  # noqa: PLC0415

    model = build_model(preset("370m"), device="meta")
    state = model.state_dict()
    return Measurement(
        values={
            "parameter_count": (sum(p.numel() for p in model.parameters()), "parameters"),
            "state_dict_parameters": (sum(t.numel() for t in state.values()), "parameters"),
            "tensors": (len(state), "tensors"),
        },
        workload="sum of numel over parameters() (each shared tensor once) and over the "
        "state dict of build_model(preset('370m'), device='meta')",
        inputs=_sources(ctx.root),
    )


def _write_tokenizer(directory: Path, ids: list[int]) -> Path:
    directory.mkdir(parents=True)
    vocab = {f"tok{i}": i for i in ids[:-1]}
    vocab["<|endoftext|>"] = ids[-1]
    data = {
        "added_tokens": [{"id": ids[-1], "content": "<|endoftext|>", "special": True}],
        "model": {"type": "BPE", "vocab": vocab, "merges": []},
    }
    (directory / "tokenizer.json").write_text(json.dumps(data))
    return directory


@measures("GATE-ARCH-370M-006")
def mismatched_vocab_pairs(ctx: GateContext) -> Measurement:
    from trainer.model import (  # noqa: PLC0415
        VocabMismatchError,
        check_vocab_agreement,
        preset,
        tokenizer_vocab_size,
    )
    from trainer.model.llama import build_model  # noqa: PLC0415
    from trainer.tokenizer.model import TokenizerFileError  # noqa: PLC0415

    model_rows = build_model(preset("370m"), device="meta").model.embed_tokens.num_embeddings

    def verdict(model_vocab: int, tokenizer: Path) -> tuple[str, str]:
        """("accepted", "") or (the refusal's kind: "refused" for VocabMismatchError or
        TokenizerFileError, "crash" for any other exception; its message)."""
        try:
            check_vocab_agreement(model_vocab, tokenizer_vocab_size(tokenizer))
        except (VocabMismatchError, TokenizerFileError) as exc:
            return "refused", str(exc)
        except Exception as exc:  # a crash is not the documented refusal
            return "crash", f"{type(exc).__name__}: {exc}"
        return "accepted", ""

    with tempfile.TemporaryDirectory() as tmp:
        full = _write_tokenizer(Path(tmp) / "full", list(range(VOCAB)))
        gapped = _write_tokenizer(
            Path(tmp) / "gapped", [i for i in range(VOCAB + 1) if i != GAP_ID]
        )
        # (model vocab, tokenizer, the numbers a documented refusal names): both sizes, or
        # for the gapped tokenizer the missing id and the highest id.
        mismatched = [(v, full, (v, VOCAB)) for v in MISMATCHED_MODEL_VOCABS] + [
            (VOCAB, gapped, (GAP_ID, VOCAB)),
            (VOCAB + 1, gapped, (GAP_ID, VOCAB)),
        ]
        wrongly_accepted, crashed, unnamed = [], [], []
        for v, t, numbers in mismatched:
            kind, message = verdict(v, t)
            pair = f"{v} / {t.name}"
            if kind == "accepted":
                wrongly_accepted.append(pair)
            elif kind == "crash":
                crashed.append(f"{pair}: {message}")
            elif not all(str(n) in message for n in numbers):
                unnamed.append(f"{pair}: {message}")
        matched_kind, matched_message = verdict(model_rows, full)
        matched_refused = int(matched_kind != "accepted")
    return Measurement(
        values={
            "mismatched_pairs_accepted": (len(wrongly_accepted), "pairs"),
            "mismatched_pairs_checked": (len(mismatched), "pairs"),
            # The other side: the matched pair refused (for any reason, a crash included).
            "matched_pairs_refused": (matched_refused, "pairs"),
            # A refusal must be the documented one: VocabMismatchError/TokenizerFileError
            # naming both numbers. Any other exception is a crash, not a refusal.
            "refusals_by_crash": (len(crashed), "pairs"),
            "refusals_not_naming_both_sizes": (len(unnamed), "pairs"),
        },
        workload=f"tokenizer_vocab_size + check_vocab_agreement on a synthetic {VOCAB}-entry "
        f"tokenizer.json against models of vocab {list(MISMATCHED_MODEL_VOCABS)}, and a "
        f"tokenizer of {VOCAB} entries with highest id {VOCAB} (id {GAP_ID} missing) against "
        f"{VOCAB} and {VOCAB + 1}; the matched pair uses the embedding rows of "
        "build_model(preset('370m'), device='meta')",
        inputs=_sources(ctx.root),
        notes="; ".join(
            [f"accepted: {', '.join(wrongly_accepted)}"] * bool(wrongly_accepted)
            + [f"crashed: {' | '.join(crashed)}"] * bool(crashed)
            + [f"not naming both sizes: {' | '.join(unnamed)}"] * bool(unnamed)
            + [f"matched pair refused: {matched_message}"] * matched_refused
        ),
    )
