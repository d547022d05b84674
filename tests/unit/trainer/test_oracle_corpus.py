"""The verb-grammar corpus (FALSIFY-TRAIN-LOOP-017's rule): counts, the held-out split,
spot checks of the Spanish conjugations, and the oracle's tokenization."""

from collections import Counter

import pytest

from trainer.oracle.data import VOCAB_SIZE, build_oracle_data, check_validation_covered
from trainer.oracle.verbs import HELD_OUT, TENSES, VERBS, all_forms, split_forms


def test_600_forms_20_verbs_5_tenses_and_unique_lines():
    forms = all_forms()
    assert len(VERBS) == 20 and len(TENSES) == 5
    assert len(forms) == 600
    assert len({f.line for f in forms}) == 600
    assert Counter(f.verb for f in forms) == {v.english: 30 for v in VERBS}


def test_held_out_verbs_are_validation_only():
    train, val = split_forms(all_forms())
    assert (len(train), len(val)) == (480, 120)
    assert {f.verb for f in val} == set(HELD_OUT) and len(HELD_OUT) == 4
    assert not {f.verb for f in train} & set(HELD_OUT)
    spanish_val = {f.spanish.split()[-1] for f in val}
    assert not spanish_val & {f.spanish.split()[-1] for f in train}


def test_split_refuses_unknown_held_out_verb():
    with pytest.raises(ValueError, match="fly"):
        split_forms(all_forms(), held_out=("fly",))


@pytest.mark.parametrize(
    ("verb", "tense", "person", "line"),
    [
        ("speak", "present", "1sg", "I speak = yo hablo"),
        ("speak", "future", "1pl", "we will speak = nosotros hablaremos"),
        ("eat", "preterite", "3sg", "he ate = él comió"),
        ("live", "present", "1pl", "we live = nosotros vivimos"),
        ("live", "present", "2pl", "you all live = vosotros vivís"),
        ("drink", "conditional", "2sg", "you would drink = tú beberías"),
        ("write", "perfect", "3pl", "they have written = ellos han escrito"),
        ("open", "perfect", "3sg", "he has opened = él ha abierto"),
        ("have", "present", "3sg", "he has = él tiene"),
        ("have", "future", "1sg", "I will have = yo tendré"),
        ("make", "preterite", "3sg", "he made = él hizo"),
        ("make", "conditional", "3pl", "they would make = ellos harían"),
        ("say", "perfect", "1pl", "we have said = nosotros hemos dicho"),
        ("study", "present", "3sg", "he studies = él estudia"),
        ("receive", "preterite", "3pl", "they received = ellos recibieron"),
        ("sing", "perfect", "1sg", "I have sung = yo he cantado"),
    ],
)
def test_conjugation_spot_checks(verb, tense, person, line):
    (form,) = [f for f in all_forms() if (f.verb, f.tense, f.person) == (verb, tense, person)]
    assert form.line == line


def test_tokenizer_trained_on_training_split_round_trips_every_form():
    data = build_oracle_data()
    assert data.tokenizer.vocab_size == VOCAB_SIZE
    assert len(data.train_sequences) == 480 and len(data.val_sequences) == 120
    for seq, form in zip(data.train_sequences, data.train_forms, strict=True):
        assert seq[0] == seq[-1] == data.eot_id
        assert data.tokenizer.decode(seq[1:-1]) == form.line
        assert data.pad_id not in seq


def test_every_validation_target_is_a_training_target():
    data = build_oracle_data()
    trained = {t for seq in data.train_sequences for t in seq[1:]}
    assert {t for seq in data.val_sequences for t in seq[1:]} <= trained


def test_a_vocabulary_that_leaves_validation_targets_unseen_is_refused():
    # At 512 the training split's words are merged whole and held-out stems fall apart
    # into pieces never seen as targets: the comparison would be about smoothing.
    with pytest.raises(ValueError, match="never occur as a training target"):
        build_oracle_data(vocab_size=512)
    with pytest.raises(ValueError, match=r"first: \[7\]"):
        check_validation_covered([[0, 1, 2]], [[0, 7, 1]])
