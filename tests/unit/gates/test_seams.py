"""gates.audit.seams: a mutant's seam holds when the attribute exists and its replacement accepts
every call of the original; checked in process here, on throwaway modules and classes (the
audit's end-to-end use is in test_audit.py)."""

from __future__ import annotations

import inspect
import types
from pathlib import Path

import pytest

from gates.audit import seams


def sig(fn) -> inspect.Signature:
    return inspect.signature(fn)


def test_every_call_of_a_small_signature_is_enumerated():
    # (a, /, b, c=1, *, d): a positionally always; b positionally or by keyword; c
    # positionally, by keyword or left out; d by keyword.
    def f(a, /, b, c=1, *, d): ...

    got = sorted((tuple(p), tuple(k)) for p, k in seams.calls(sig(f)))
    assert got == sorted(
        [
            (("a",), ("b", "d")),
            (("a",), ("b", "c", "d")),
            (("a", "b"), ("d",)),
            (("a", "b"), ("c", "d")),
            (("a", "b", "c"), ("d",)),
        ]
    )


def test_star_args_and_star_kwargs_add_one_extra_each():
    def f(a, *args, **kwargs): ...

    got = sorted((tuple(p), tuple(k)) for p, k in seams.calls(sig(f)))
    assert (("a", "*args"), ("**kwargs",)) in got and ((), ("a",)) in got


def original(prices, discount=0.0, *, currency="EUR"): ...


@pytest.mark.parametrize(
    ("replacement", "status", "why"),
    [
        (lambda prices, discount=0.0, *, currency="EUR": 0, "ok", ""),
        (lambda *args, **kwargs: 0, "ok", ""),
        (lambda prices, *args, **kwargs: 0, "ok", ""),
        (lambda prices, discount=0.0, *, currency="EUR", rounding=2: 0, "ok", ""),
        (lambda prices, discount=0.0: 0, "incompatible", "unexpected keyword argument 'currency'"),
        (
            lambda prices, *, currency="EUR": 0,
            "incompatible",
            "unexpected keyword argument 'discount'",
        ),
        (lambda items, discount=0.0, *, currency="EUR": 0, "incompatible", "'items'"),
        (lambda prices, discount, *, currency="EUR": 0, "incompatible", "'discount'"),
        (lambda prices, /, discount=0.0, *, currency="EUR": 0, "incompatible", "positional only"),
        (lambda prices, discount=0.0, *, currency="EUR", tax: 0, "incompatible", "'tax'"),
        (lambda prices, discount=0.0, currency="EUR": 0, "ok", ""),
        (None, "incompatible", "the replacement is a NoneType"),
    ],
    ids=[
        "same",
        "star-args-star-kwargs",
        "star-args-after-first",
        "extra-optional-keyword",
        "drops-a-keyword-only",
        "drops-a-positional",
        "renames-a-parameter",
        "makes-an-optional-required",
        "makes-a-parameter-positional-only",
        "adds-a-required-keyword",
        "keyword-only-may-become-positional",
        "not-callable",
    ],
)
def test_a_replacement_holds_only_if_every_call_of_the_original_binds(replacement, status, why):
    seam = seams.compare("shop", "total", original, replacement)
    assert seam.status == status, seam.reason
    assert why in seam.reason
    assert seam.original == "(prices, discount=…, *, currency=…)"


def test_a_positional_only_parameter_may_be_renamed():
    def f(a, /): ...

    assert seams.compare("m", "f", f, lambda x: 0).status == "ok"


def test_a_builtin_without_a_signature_is_unchecked_not_failed():
    seam = seams.compare("builtins", "dict", dict, lambda *a, **k: {})
    assert (seam.status, seam.reason) == ("unchecked", "the original has no signature")
    assert seam.status not in seams.BROKEN


def test_a_value_may_be_replaced_by_anything():
    assert seams.compare("m", "EVERY", 100, 10**12).status == "ok"
    assert seams.compare("m", "hook", None, lambda step: None).status == "ok"


SOMEONES_ROOT, MARKER = Path("/home/someone/project"), object()


def test_defaults_are_elided_so_no_path_or_address_is_recorded():
    def f(root=SOMEONES_ROOT, marker=MARKER): ...

    assert seams.render(sig(f)) == "(root=…, marker=…)"


@pytest.fixture
def shop() -> types.ModuleType:
    module = types.ModuleType("shop")
    exec(  # a module of its own: nothing another test imports is patched
        "def total(prices, discount=0.0):\n    return sum(prices)\n"
        "class Till:\n"
        "    @classmethod\n"
        "    def open(cls, float_cents):\n        return cls()\n"
        "    def ring(self, cents):\n        return cents\n",
        vars(module),
    )
    return module


def test_a_missing_attribute_is_recorded_and_not_created_even_without_raising(shop):
    patch = seams.RecordingPatch()
    patch.setattr(shop, "sum_prices", lambda prices: 0, raising=False)
    (seam,) = patch.seams
    assert (seam.target, seam.status) == ("shop.sum_prices", "missing")
    assert not hasattr(shop, "sum_prices")


def test_the_dry_application_is_undone_and_compares_with_the_real_original(shop):
    real = shop.total
    patch = seams.RecordingPatch()
    patch.setattr(shop, "total", lambda *args, **kwargs: 1)
    patch.setattr(shop, "total", lambda prices: 2)  # second patch: checked against the real one
    assert shop.total([1]) == 2, "applied for real, so the mutant's later lines see it"
    patch.undo()
    assert shop.total is real
    assert [s.status for s in patch.seams] == ["ok", "incompatible"]


def test_methods_are_compared_as_the_class_looks_them_up(shop):
    patch = seams.RecordingPatch()
    patch.setattr(shop.Till, "open", classmethod(lambda cls, float_cents: cls()))
    patch.setattr(shop.Till, "ring", lambda self, cents: 0)
    patch.setattr(shop.Till, "ring", lambda cents: 0)  # forgot self
    patch.undo()
    assert [(s.target, s.status) for s in patch.seams] == [
        ("shop.Till.open", "ok"),
        ("shop.Till.ring", "ok"),
        ("shop.Till.ring", "incompatible"),
    ]


def test_a_dotted_target_is_resolved_and_a_missing_module_is_missing(monkeypatch):
    patch = seams.RecordingPatch()
    patch.setattr("json.dumps", lambda obj, **kwargs: "")
    patch.setattr("json.no_such_function", lambda: None)
    patch.setattr("no_such_package_xyz.f", lambda: None)
    patch.undo()
    assert [(s.target, s.status) for s in patch.seams] == [
        ("json.dumps", "ok"),
        ("json.no_such_function", "missing"),
        ("no_such_package_xyz.f", "missing"),
    ]


def test_a_seam_report_is_broken_by_an_error_or_a_broken_seam():
    ok = seams.Seam("m", "f", "ok")
    unchecked = seams.Seam("m", "g", "unchecked")
    missing = seams.Seam("m", "h", "missing", reason="no such attribute")
    assert not seams.SeamReport("x", (ok, unchecked)).broken
    assert seams.SeamReport("x", (ok, missing)).broken
    assert seams.SeamReport("x", (), "applying it raised LookupError").broken
    report = seams.SeamReport("x", (ok, missing))
    assert seams.SeamReport.from_json("x", report.to_json()) == report


def test_a_replacement_that_differs_only_in_names_says_so():
    renamed = seams.compare("shop", "total", original, lambda p, d=0.0, *, currency="EUR": 0)
    assert renamed.status == "incompatible"
    assert renamed.reason.endswith("give the replacement the original's names")
    dropped = seams.compare("shop", "total", original, lambda prices, *, currency="EUR": 0)
    assert "original's names" not in dropped.reason, "by position it does not bind either"
