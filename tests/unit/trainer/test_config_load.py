"""The run config loader (trainer/config/load.py): YAML into frozen dataclasses with the
schema's defaults, every problem reported with its line and field, never a traceback;
and N, the sequence count, agreeing with the data loader (trainer/config/sequences.py)."""

from __future__ import annotations

import copy
import dataclasses
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from trainer.config.algebra import AlgebraInputs
from trainer.config.load import load_config
from trainer.config.messages import ConfigError, ConfigFinding
from trainer.config.sequences import sequences_in
from trainer.config.validate import validate
from trainer.model.config import preset

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "configs"
QUICKSTART = FIXTURES / "valid" / "tiny-quickstart.yaml"

MINIMAL = """\
model:
  preset: tiny
data:
  shards: data/
  tokenizer: tok/
  micro_batch: 4
  seq_len: 128
optimizer:
  lr: 3.0e-4
training:
  epochs: 2
  max_steps: 100
  warmup_steps: 10
  output_dir: out/
"""


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def findings_of(path: Path) -> list[ConfigFinding]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value.findings


def test_a_full_config_loads_into_frozen_dataclasses():
    cfg = load_config(QUICKSTART)
    assert cfg.name == "tiny-quickstart"
    assert cfg.model == preset("tiny") and cfg.model_preset == "tiny"
    assert cfg.data.shards == Path("data/stdlib-512/") and cfg.data.micro_batch == 8
    assert (cfg.optimizer.lr, cfg.optimizer.min_lr, cfg.optimizer.min_lr_given) == (
        1e-3,
        1e-4,
        True,
    )
    assert cfg.training.gradient_accumulation == 2 and cfg.training.seed == 1234
    assert cfg.training.output_dir == Path("checkpoints/tiny-quickstart")
    assert cfg.monitoring.log_interval == 10
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.training.max_steps = 1  # type: ignore[misc]
    text = QUICKSTART.read_text().splitlines()
    assert text[cfg.line_of("training.epochs") - 1].strip() == "epochs: 4"
    assert text[cfg.line_of("model.preset") - 1].strip() == "preset: tiny"
    assert cfg.to_json()["data"]["shards"] == "data/stdlib-512"


def test_omitted_keys_take_the_schema_defaults_and_cite_their_section(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL))
    assert cfg.name is None
    assert cfg.optimizer.name == "adamw"
    assert (cfg.optimizer.beta1, cfg.optimizer.beta2) == (0.9, 0.95)
    assert cfg.optimizer.eps == 1e-8 and cfg.optimizer.weight_decay == 0.1
    assert cfg.optimizer.grad_clip == 1.0
    assert cfg.optimizer.min_lr == pytest.approx(3e-5, rel=1e-15)
    assert not cfg.optimizer.min_lr_given
    assert cfg.training.gradient_accumulation == 1
    assert cfg.training.lr_scheduler == "cosine" and cfg.training.mixed_precision == "fp32"
    assert cfg.training.force_token_budget is False
    assert cfg.training.keep_checkpoints == 2
    assert cfg.monitoring.log_interval == 10
    assert cfg.line_of("training.seed") is None
    assert cfg.position_of("training.seed") == (10, 1), "a default is added under training:"
    assert cfg.position_of("monitoring.log_interval") == (1, 1)


def test_keep_checkpoints_below_two_is_refused_at_its_line(tmp_path):
    # One checkpoint kept leaves no fallback when the newest is damaged.
    text = MINIMAL.replace("  output_dir: out/", "  output_dir: out/\n  keep_checkpoints: 1")
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert "keep_checkpoints" in str(err.value) and ":15:21:" in str(err.value), str(err.value)
    kept = load_config(write(tmp_path, text.replace("keep_checkpoints: 1", "keep_checkpoints: 5")))
    assert kept.training.keep_checkpoints == 5


def test_data_parallel_is_ddp_or_fsdp_and_anything_else_is_refused_at_its_line(tmp_path):
    assert load_config(write(tmp_path, MINIMAL)).training.data_parallel == "ddp"
    text = MINIMAL.replace("  output_dir: out/", "  output_dir: out/\n  data_parallel: fsdp")
    cfg = load_config(write(tmp_path, text))
    assert cfg.training.data_parallel == "fsdp"
    assert cfg.to_json()["training"]["data_parallel"] == "fsdp"
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text.replace("data_parallel: fsdp", "data_parallel: zero3")))
    assert "training.data_parallel" in str(err.value) and ":15:18:" in str(err.value), str(
        err.value
    )


def test_grad_clip_null_turns_clipping_off(tmp_path):
    cfg = load_config(
        write(tmp_path, MINIMAL.replace("  lr: 3.0e-4", "  lr: 3.0e-4\n  grad_clip: null"))
    )
    assert cfg.optimizer.grad_clip is None


def test_yaml_numbers_with_underscores_and_exponents_are_numbers():
    cfg = load_config(FIXTURES / "valid" / "architecture-with-underscores.yaml")
    assert cfg.model.vocab_size == 32_768 and type(cfg.model.vocab_size) is int
    assert cfg.model.hidden_size == 1024 and cfg.model.intermediate_size == 4096
    assert cfg.model.rope_theta == 10_000.0 and cfg.model.rms_norm_eps == 1e-5
    assert cfg.data.seq_len == 1024
    assert cfg.training.max_steps == 1_000_000 and cfg.training.warmup_steps == 100_000
    assert cfg.optimizer.lr == 3e-4
    assert cfg.model_preset is None


@pytest.mark.parametrize(
    ("written", "value"), [("3e-4", 3e-4), ("3.0E-4", 3e-4), ("0.000_3", 3e-4), ("1", 1)]
)
def test_learning_rates_in_every_yaml_number_form(tmp_path, written, value):
    cfg = load_config(write(tmp_path, MINIMAL.replace("lr: 3.0e-4", f"lr: {written}")))
    assert cfg.optimizer.lr == value


def test_a_preset_takes_architecture_overrides(tmp_path):
    text = MINIMAL.replace(
        "  preset: tiny", "  preset: tiny\n  architecture:\n    vocab_size: 8_192"
    )
    cfg = load_config(write(tmp_path, text))
    assert cfg.model == dataclasses.replace(preset("tiny"), vocab_size=8192)


def test_every_problem_is_reported_in_one_pass_in_file_order():
    found = findings_of(FIXTURES / "invalid" / "unknown-keys.yaml")
    assert len(found) == 8
    assert [f.line for f in found] == sorted(f.line for f in found)
    by_field = {f.field: f for f in found}
    assert by_field["data.batch_size"].hint == "did you mean micro_batch?"
    assert by_field["training.gradient_accumulaton"].hint == ("did you mean gradient_accumulation?")
    assert by_field["training.seq_len"].hint == "seq_len belongs under data:"
    assert by_field["data.shards"].code == "missing-key"


def test_architecture_problems_are_cited_at_the_key_that_causes_them():
    path = FIXTURES / "invalid" / "heads-not-dividing-hidden.yaml"
    (finding,) = findings_of(path)
    line = path.read_text().splitlines()[finding.line - 1]
    assert line.strip() == "num_attention_heads: 16"
    assert finding.field == "model.architecture.num_attention_heads"
    assert "62.5" in finding.message and "choose heads dividing 1000" in finding.hint


def test_a_preset_override_that_breaks_gqa_is_cited_at_the_override():
    (finding,) = findings_of(FIXTURES / "invalid" / "kv-heads-not-dividing-heads.yaml")
    assert finding.field == "model.architecture.num_key_value_heads"
    assert "not divisible by num_key_value_heads 3" in finding.message
    assert finding.hint == "use one of [1, 2, 4]"


def test_a_finding_renders_as_file_line_column_field_message_hint(tmp_path):
    path = write(tmp_path, MINIMAL.replace("epochs: 2", "epochs: 1.0"))
    (finding,) = findings_of(path)
    assert finding.render() == (
        f"{path}:11:11: error training.epochs: 1.0 is a decimal number, expected integer "
        "(write 1 without a decimal point)"
    )


@pytest.mark.parametrize(
    ("content", "code", "message"),
    [
        (b"", "file-empty", "empty file"),
        (b"- a\n- b\n", "not-a-mapping", "the config is a list, not a mapping"),
        (b"42\n", "not-a-mapping", "the config is an integer, not a mapping"),
        (b"model: [\n", "yaml-syntax", "expected the node content"),
        (b"model:\x00\n", "file-binary", "binary content"),
        (b"a: 1\na: 2\n", "yaml-duplicate-key", 'duplicate key "a"'),
        (b"a: &x 1\nb: *x\n", "yaml-alias", "alias *x"),
        (b"\xff\xfe: 1\n", "file-encoding", "is not UTF-8"),
    ],
)
def test_unreadable_yaml_is_one_finding_not_a_traceback(tmp_path, content, code, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    (finding,) = findings_of(path)
    assert finding.code == code and message in finding.message
    assert finding.line is not None


def test_a_missing_file_or_a_directory_is_a_finding_without_a_line(tmp_path):
    (missing,) = findings_of(tmp_path / "nope.yaml")
    assert missing.line is None and missing.message == "no such file"
    assert missing.render() == (
        f"{tmp_path / 'nope.yaml'}: error: no such file "
        "(check the path; a relative one starts at the working directory)"
    )
    (directory,) = findings_of(tmp_path)
    assert directory.message == "is a directory, not a config file"


def test_integers_beyond_int64_and_floats_beyond_float_range_are_refused(tmp_path):
    text = MINIMAL.replace("max_steps: 100", f"max_steps: {2**63}").replace(
        "lr: 3.0e-4", "lr: 3.0e-4\n  eps: " + "9" * 400
    )
    found = {f.field: f for f in findings_of(write(tmp_path, text))}
    assert found["training.max_steps"].code == "out-of-range"
    assert found["optimizer.eps"].code == "wrong-type"


def test_algebra_inputs_carry_the_config_numbers():
    cfg = load_config(QUICKSTART)
    x = cfg.algebra_inputs(sequences=1000, params=158_016)
    assert x == AlgebraInputs(
        sequences=1000,
        micro_batch=8,
        grad_accum=2,
        seq_len=128,
        epochs=4,
        max_steps=2000,
        warmup_steps=200,
        params=158_016,
        peak_lr=1e-3,
        min_lr=1e-4,
    )


# ---------------------------------------------------------------- never a traceback
_YAML_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["preset", "x", "lr"]), st.integers(-2, 2), max_size=2),
)
_BASE = YAML(typ="safe").load(MINIMAL)
_BASE["model"]["architecture"] = {"vocab_size": 512, "num_key_value_heads": 2}


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "run.yaml"


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(
        st.tuples(
            st.sampled_from(list(_paths(_BASE))),
            st.sampled_from(["set", "del", "add"]),
            _YAML_VALUES,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_no_edit_of_a_config_makes_validate_raise(scratch, edits):
    data = copy.deepcopy(_BASE)
    for path, action, value in edits:
        parent = data
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        if action == "del":
            parent.pop(path[-1], None)
        elif action == "add":
            parent[f"{path[-1]}_extra"] = value
        else:
            parent[path[-1]] = value
    out = io.StringIO()
    YAML(typ="safe").dump(data, out)
    scratch.write_text(out.getvalue(), encoding="utf-8")
    findings, cfg, _ = validate(scratch)  # must not raise
    assert (cfg is None) == any(
        f.severity == "error" and not f.code.startswith("inv-") for f in findings
    )
    for finding in findings:
        assert finding.line is not None and finding.line >= 1 and finding.render()


# ---------------------------------------------------------------- N from the manifest
@pytest.fixture(scope="module")
def encoded_dir(tmp_path_factory) -> Path:
    from trainer.data.encode import encode_corpus  # noqa: PLC0415
    from trainer.tokenizer import bpe  # noqa: PLC0415
    from trainer.tokenizer.model import ByteLevelBPE  # noqa: PLC0415
    from trainer.tokenizer.pretokenize import count_words  # noqa: PLC0415

    docs = [f"def f{i}(x):\n    return x * {i} + {i * i}\n" * (1 + i % 5) for i in range(60)]
    root = tmp_path_factory.mktemp("seq")
    model = bpe.train_fast(
        count_words(docs), vocab_size=300, min_frequency=2, special_tokens=("<|endoftext|>",)
    )
    ByteLevelBPE.from_model(model).save(root / "tok")
    files = []
    for i, doc in enumerate(docs):
        files.append(root / "corpus" / f"d{i}.py")
        files[-1].parent.mkdir(exist_ok=True)
        files[-1].write_text(doc, encoding="utf-8")
    encode_corpus(files, root / "tok", root / "data", shard_tokens=211, val_fraction=0.1)
    return root / "data"


@pytest.mark.parametrize("seq_len", [1, 7, 64, 333])
def test_the_sequence_count_is_what_the_loop_reads(encoded_dir, seq_len):
    from trainer.data.manifest import load_manifest  # noqa: PLC0415
    from trainer.train.sequences import ShardSequences  # noqa: PLC0415 - torch, test only

    n = sequences_in(encoded_dir, seq_len)
    assert n == sequences_in(load_manifest(encoded_dir), seq_len)
    train_tokens = load_manifest(encoded_dir).data["splits"]["train"]["tokens"]
    assert n == (train_tokens - 1) // seq_len
    # The loop's training source (trainer/train/sequences.py) numbers the same N windows.
    source = ShardSequences(encoded_dir, "train", seq_len)
    assert (source.num_sequences, source.stream_tokens) == (n, train_tokens)


def test_a_missing_manifest_is_a_shard_error(tmp_path):
    from trainer.data.shards import ShardError  # noqa: PLC0415

    with pytest.raises(ShardError, match=r"manifest\.json"):
        sequences_in(tmp_path, 128)
