"""The Trainer pack's own contract with its adopters (hf_trainer_pack.py): the factory a
project names in its pyproject.toml is found, and every way of naming it wrongly is refused
naming the file, line and key; a factory's Trainer is the one the scenarios run, around the
scenario's own model. Not bound to a gate: examples/hf-team-trainer measures a factory."""

from pathlib import Path
from types import SimpleNamespace

import hf_example
import hf_trainer_pack
import pytest
from torch.utils.data import SequentialSampler
from transformers import Trainer


def project(tmp_path: Path, table: str, module: str | None = None) -> Path:
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n{table}\n')
    if module is not None:
        (tmp_path / "my_factory_module.py").write_text(module)
    return tmp_path


FACTORY = """
from transformers import Trainer

def build(model, args, train_dataset, callbacks):
    return Trainer(model=model, args=args, train_dataset=train_dataset, callbacks=callbacks)

NOT_CALLABLE = 3
"""


def test_the_named_factory_is_loaded_and_named(tmp_path):
    root = project(
        tmp_path, '[tool.shipgate-hf-trainer]\ntrainer_factory = "my_factory_module:build"', FACTORY
    )
    factory = hf_trainer_pack.load_factory(root)
    assert callable(factory) and factory.__name__ == "build"
    assert hf_trainer_pack.factory_name(factory) == "my_factory_module:build"
    assert hf_trainer_pack.factory_name(None) == "transformers.Trainer"


@pytest.mark.parametrize(
    ("table", "why"),
    [
        ("", "is missing"),
        ("[tool.shipgate-hf-trainer]\nother = 1", "is missing"),
        (
            '[tool.shipgate-hf-trainer]\ntrainer_factory = "my_factory_module:build"\nx = 1',
            "unknown key(s) x",
        ),
        ('[tool.shipgate-hf-trainer]\ntrainer_factory = "my_factory_module.build"', "is not"),
        ("[tool.shipgate-hf-trainer]\ntrainer_factory = 3", "is not"),
        (
            '[tool.shipgate-hf-trainer]\ntrainer_factory = "no_such_module_xyz:build"',
            "cannot import",
        ),
        (
            '[tool.shipgate-hf-trainer]\ntrainer_factory = "my_factory_module:absent"',
            "has no function",
        ),
        (
            '[tool.shipgate-hf-trainer]\ntrainer_factory = "my_factory_module:NOT_CALLABLE"',
            "has no function",
        ),
        ("[tool.shipgate-hf-trainer\n", "cannot read it"),
    ],
)
def test_a_missing_or_malformed_factory_is_refused_naming_file_and_key(tmp_path, table, why):
    root = project(tmp_path, table, FACTORY)
    with pytest.raises(hf_trainer_pack.FactoryError) as refused:
        hf_trainer_pack.load_factory(root)
    message = str(refused.value)
    assert str(root / "pyproject.toml") in message and why in message, message
    lines = table.splitlines()
    named = [n for n, line in enumerate(lines) if line.startswith("trainer_factory")]
    if named:  # the file's line 4 is the table's first line (see project())
        assert f"pyproject.toml:{4 + named[0]}:" in message, message


def _data():
    return hf_example.ToySequences(4, 16, hf_example.TinyLlama().vocab_size)


def test_the_factorys_trainer_runs_around_the_scenarios_model(tmp_path):
    built = []

    class Mine(Trainer):
        pass

    def factory(model, args, train_dataset, callbacks):
        built.append((model, args, train_dataset, callbacks))
        return Mine(model=model, args=args, train_dataset=train_dataset, callbacks=callbacks)

    model, data, probe = (
        hf_example.build_model(hf_example.TinyLlama()),
        _data(),
        hf_example.Recorder(),
    )
    args = hf_example.training_args(tmp_path)
    trainer = hf_example.make_trainer(model, args, data, probe, factory=factory)
    assert type(trainer) is Mine and built == [(model, args, data, [probe])]
    # a release without train_sampling_strategy: this instance alone takes them in order
    trainer = hf_example.make_trainer(
        model, args, data, factory=factory, trainer_class=hf_example.InOrderTrainer
    )
    assert type(trainer) is Mine and isinstance(trainer._get_train_sampler(), SequentialSampler)
    assert not isinstance(
        Mine(model=model, args=args, train_dataset=data)._get_train_sampler(), SequentialSampler
    )


def test_a_factory_that_builds_no_trainer_or_trains_another_model_is_refused(tmp_path):
    model, data = hf_example.build_model(hf_example.TinyLlama()), _data()
    args = hf_example.training_args(tmp_path)
    with pytest.raises(TypeError, match="returned"):
        hf_example.make_trainer(model, args, data, factory=lambda *a: object())
    other = hf_example.build_model(hf_example.TinyLlama(), seed=1)
    with pytest.raises(ValueError, match="trains another model"):
        hf_example.make_trainer(
            model,
            args,
            data,
            factory=lambda m, a, d, c: Trainer(model=other, args=a, train_dataset=d),
        )


def test_padding_free_windows_hold_a_trainer_to_its_sequences_padded(monkeypatch):
    # Positive control: the stock Trainer over padding-free rows (DataCollatorWithFlattening
    # in place of its collator) gives each window's padded token mean, rows of 2 sequences.
    results = hf_example.accumulation_steps(2, 2, 5, padding_free=True)
    assert [r.micro_batch_targets for r in results] == [[9, 22], [14]]
    assert all(r.max_grad_relative_error <= 1e-6 for r in results), results
    assert all(r.loss_relative_error <= 1e-6 for r in results), results
    # Seeded defect: a collator that leaves out position_ids makes each row one long
    # sequence; the scenario must see it (the reference is the padded window, not the row).
    flattening = hf_example.padding_free_collator().__class__
    monkeypatch.setattr(
        hf_example, "padding_free_collator", lambda: flattening(return_position_ids=False)
    )
    broken = hf_example.accumulation_steps(2, 2, 5, padding_free=True)
    assert broken[0].max_grad_relative_error > 1e-2, broken


def test_a_release_without_a_padding_free_collator_is_named(monkeypatch):
    # transformers 4.43 and older: the collator is looked up by name and its absence named
    monkeypatch.setattr(hf_example, "transformers", SimpleNamespace(__version__="4.43.0"))
    with pytest.raises(ValueError, match=r"4\.43\.0 has no DataCollatorWithFlattening"):
        hf_example.accumulation_steps(2, 2, 5, padding_free=True)
