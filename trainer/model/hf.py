"""Weights in Hugging Face's layout: a config.json for LlamaForCausalLM, safetensors save
and strict load.

    save_weights(model, out / "model.safetensors")                 # bytes written
    (out / "config.json").write_text(json.dumps(hf_config_dict(cfg)))
    load_weights(model, out / "model.safetensors")                 # strict; names every mismatch

Safetensors only, never pickle. Tensor names are the state dict's, which are HF's; a
tied model stores no lm_head.weight (HF semantics). The writer refuses, writing nothing,
an empty state dict or one whose names or shapes differ from parameter_shapes(cfg), and
replaces the target only after the whole file is on disk. Checkpoints (optimizer state,
manifests) and the export command build on these two functions.
Contract: C-LLAMA-370M-SOVEREIGN (INV-ARCH-370M-004/008/009).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from gates.io.files import replacing
from trainer.model.config import INIT_STD, LlamaConfig
from trainer.model.llama import Llama
from trainer.model.params import parameter_shapes

_LISTED = 5  # names shown per kind of problem; the count says how many more


class WeightsFileError(ValueError):
    """A weights file cannot be written or loaded as asked (names the file and tensors)."""


def hf_config_dict(cfg: LlamaConfig, *, dtype: str = "float32") -> dict:
    """config.json for transformers.LlamaForCausalLM describing ``cfg`` (weights in ``dtype``)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.resolved_head_dim,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps,
        # transformers >= 5 reads rope_parameters; 4.x reads rope_theta.
        "rope_parameters": {"rope_type": "default", "rope_theta": float(cfg.rope_theta)},
        "rope_theta": float(cfg.rope_theta),
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": INIT_STD,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "dtype": dtype,
    }


def _as_written(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached, on CPU, row-major contiguous."""
    return {name: t.detach().to("cpu").contiguous() for name, t in state.items()}


def _tensors_for_file(model: Llama) -> dict[str, torch.Tensor]:
    """The state dict as written."""
    return _as_written(model.state_dict())


def _aliased(state: dict[str, torch.Tensor]) -> list[str]:
    """Names whose storage another name already holds."""
    first: dict[tuple[torch.device, int], str] = {}
    aliased = []
    for name, t in state.items():
        key = (t.device, t.untyped_storage().data_ptr())
        if key in first:
            aliased.append(f"{name} shares storage with {first[key]}")
        else:
            first[key] = name
    return aliased


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - _LISTED} more" if len(names) > _LISTED else ""
    return ", ".join(names[:_LISTED]) + more


def _layout_problems(
    found: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]
) -> list[str]:
    problems = []
    missing = [n for n in expected if n not in found]
    unexpected = [n for n in found if n not in expected]
    wrong = [
        f"{n} {list(found[n])} (expected {list(expected[n])})"
        for n in expected
        if n in found and tuple(found[n]) != tuple(expected[n])
    ]
    if len(found) != len(expected):
        problems.append(f"{len(found)} tensors, expected {len(expected)}")
    if missing:
        problems.append(f"missing {_listed(missing)}")
    if unexpected:
        problems.append(f"unexpected {_listed(unexpected)}")
    if wrong:
        problems.append(f"wrong shape {_listed(wrong)}")
    return problems


def weights_to_write(
    model: Llama, path: str | Path, *, state: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """The tensors save_weights writes to ``path`` (detached, CPU, contiguous), after its
    refusals (WeightsFileError naming ``path``): a meta model, aliased tensors, an empty
    state dict, names or shapes other than the configured model's. Checkpoints
    (trainer/checkpoint/save.py) write these with their own hashing writer.

    ``state``: the model's full state dict when ``model`` itself holds only a shard of it
    (FSDP, trainer/train/fsdp.py); None reads ``model.state_dict()``."""
    given = state
    state = model.state_dict() if given is None else given
    if any(t.is_meta for t in state.values()):
        raise WeightsFileError(f"{path}: the model is on the meta device; it holds no values")
    aliased = _aliased(state)
    if aliased:
        # An untied model whose lm_head is the embedding is not the configured model.
        raise WeightsFileError(f"{path}: refusing to write aliased tensors: {_listed(aliased)}")
    tensors = _tensors_for_file(model) if given is None else _as_written(given)
    if not tensors:
        raise WeightsFileError(f"{path}: refusing to write an empty state dict")
    problems = _layout_problems(
        {n: tuple(t.shape) for n, t in tensors.items()}, parameter_shapes(model.config)
    )
    if problems:
        raise WeightsFileError(
            f"{path}: refusing to write weights that are not the configured model: "
            + "; ".join(problems)
        )
    return tensors


def save_weights(
    model: Llama, path: str | Path, *, state: dict[str, torch.Tensor] | None = None
) -> int:
    """Write the model's tensors to ``path`` (safetensors); returns the file's size in bytes.

    ``state``: the model's full state dict when ``model`` itself holds only a shard of it
    (FSDP, trainer/train/fsdp.py); None reads ``model.state_dict()``."""
    path = Path(path)
    tensors = weights_to_write(model, path, state=state)
    # "pt": the metadata from_pretrained expects. replacing() creates missing parents.
    with replacing(path) as tmp:
        save_file(tensors, str(tmp), metadata={"format": "pt"})
    return path.stat().st_size


def load_weights(
    model: Llama,
    path: str | Path,
    *,
    load: Callable[[nn.Module, dict[str, torch.Tensor]], None] | None = None,
    tensors: dict[str, torch.Tensor] | None = None,
) -> None:
    """Load ``path`` into ``model`` strictly: names, shapes and dtypes must all match.

    ``tensors``: the file's tensors, already read (a checkpoint load reads and verifies
    the bytes once, trainer/checkpoint/load.py); None reads ``path``.

    A model built on the meta device is materialized by the load (tensors assigned).
    ``load``: how the checked full tensors get into the model when load_state_dict cannot
    put them there (an FSDP model keeps its shard of each, trainer/train/fsdp.py).
    """
    path = Path(path)
    if tensors is None:
        try:
            with safe_open(str(path), framework="pt", device="cpu") as fh:
                tensors = {name: fh.get_tensor(name) for name in fh.keys()}  # noqa: SIM118 - not a dict
        except FileNotFoundError:
            raise WeightsFileError(f"{path}: no such file") from None
        except (SafetensorError, OSError) as exc:
            raise WeightsFileError(f"{path}: not a readable safetensors file ({exc})") from None
    state = model.state_dict()
    problems = _layout_problems(
        {n: tuple(t.shape) for n, t in tensors.items()},
        {n: tuple(t.shape) for n, t in state.items()},
    )
    wrong_dtype = [
        f"{n} {tensors[n].dtype} (model {state[n].dtype})"
        for n in state
        if n in tensors and tensors[n].dtype != state[n].dtype
    ]
    if wrong_dtype:
        problems.append(f"dtype differs: {_listed(wrong_dtype)}")
    if problems:
        raise WeightsFileError(f"{path}: does not fit the model: " + "; ".join(problems))
    if load is not None:
        load(model, tensors)
        return
    assign = any(t.is_meta for t in state.values())
    model.load_state_dict(tensors, strict=True, assign=assign)
