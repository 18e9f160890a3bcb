"""conformance.matching: the README's subset matching, case by case.

Every row states whether `expected` must match `actual`; a row fails if `match` disagrees,
so each rule is pinned from both sides (one row that must match, one that must not).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from milepost.conformance.matching import is_matcher, match

# (id, expected, actual, matches)
CASES: list[tuple[str, Any, Any, bool]] = [
    # mappings: subset
    ("map-equal", {"a": 1}, {"a": 1}, True),
    ("map-extra-actual-keys", {"a": 1}, {"a": 1, "b": 2}, True),
    ("map-empty-matches-any-map", {}, {"x": 1}, True),
    ("map-missing-key", {"a": 1, "b": 2}, {"a": 1}, False),
    ("map-wrong-value", {"a": 1}, {"a": 2}, False),
    ("map-vs-list", {"a": 1}, [{"a": 1}], False),
    ("map-vs-null", {}, None, False),
    ("map-nested-subset", {"a": {"b": 1}}, {"a": {"b": 1, "c": 2}, "d": 3}, True),
    ("map-nested-mismatch", {"a": {"b": 1}}, {"a": {"b": 3}}, False),
    ("map-null-value-needs-key", {"a": None}, {}, False),
    ("map-null-value", {"a": None}, {"a": None}, True),
    ("map-mixed-keys-are-literal", {"$x": 1, "y": 2}, {"$x": 1, "y": 2}, True),
    ("map-mixed-keys-missing", {"$x": 1, "y": 2}, {"y": 2}, False),
    # lists: same length, pairwise
    ("list-equal", [1, 2, 3], [1, 2, 3], True),
    ("list-shorter-actual", [1, 2, 3], [1, 2], False),
    ("list-longer-actual", [1, 2], [1, 2, 3], False),
    ("list-order-matters", [1, 2], [2, 1], False),
    ("list-elements-are-subsets", [{"a": 1}], [{"a": 1, "b": 2}], True),
    ("list-element-mismatch", [{"a": 1}, {"a": 2}], [{"a": 1}, {"a": 3}], False),
    ("list-vs-map", [], {}, False),
    ("list-vs-string", ["a", "b"], "ab", False),
    ("list-empty", [], [], True),
    ("list-tuple-actual", [1, 2], (1, 2), True),
    # numbers
    ("int-int", 30, 30, True),
    ("int-float", 30, 30.0, True),
    ("float-int", 15.8, 15.8, True),
    ("float-rounding", 0.3, 0.1 + 0.2, True),
    ("rel-tol-inside", 1e12, 1e12 + 1e2, True),
    ("rel-tol-outside", 1.0, 1.0 + 1e-6, False),
    ("number-different", 15.8, 15.9, False),
    ("zero-vs-tiny", 0, 1e-300, False),
    ("big-ints-exact", 2**70, 2**70 + 1, False),
    ("big-int-vs-float", 2**2000, 1.0, False),
    ("number-vs-string", 30, "30", False),
    ("string-vs-number", "30", 30, False),
    ("number-vs-null", 0, None, False),
    # booleans only match booleans
    ("bool-true", True, True, True),
    ("bool-false", False, False, True),
    ("bool-different", True, False, False),
    ("true-vs-1", True, 1, False),
    ("1-vs-true", 1, True, False),
    ("false-vs-0", False, 0, False),
    ("0-vs-false", 0, False, False),
    ("1.0-vs-true", 1.0, True, False),
    ("bool-vs-string", True, "true", False),
    # strings and null exact
    ("string-equal", "ok", "ok", True),
    ("string-case", "ok", "OK", False),
    ("string-no-substring", "ok", "ok!", False),
    ("null-null", None, None, True),
    ("null-vs-empty-string", None, "", False),
    ("null-vs-zero", None, 0, False),
    ("null-vs-false", None, False, False),
    ("empty-string-vs-null", "", None, False),
    ("null-vs-empty-map", None, {}, False),
    # other YAML scalars compare by type and value
    ("date-equal", dt.date(2025, 12, 11), dt.date(2025, 12, 11), True),
    ("date-vs-string", dt.date(2025, 12, 11), "2025-12-11", False),
    # $any_of
    ("any_of-first", {"$any_of": ["high", "low"]}, "high", True),
    ("any_of-second", {"$any_of": ["high", "low"]}, "low", True),
    ("any_of-none", {"$any_of": ["high", "low"]}, "mid", False),
    ("any_of-subsets", {"$any_of": [{"a": 1}, {"b": 2}]}, {"b": 2, "c": 3}, True),
    ("any_of-bool-strict", {"$any_of": [1, 2]}, True, False),
    ("any_of-empty-list", {"$any_of": []}, "x", False),
    ("any_of-not-a-list", {"$any_of": "x"}, "x", False),
    # $len
    ("len-list", {"$len": 3}, [1, 2, 3], True),
    ("len-list-wrong", {"$len": 3}, [1, 2], False),
    ("len-string", {"$len": 2}, "ab", True),
    ("len-map", {"$len": 1}, {"a": 1}, True),
    ("len-number", {"$len": 1}, 5, False),
    ("len-null", {"$len": 0}, None, False),
    ("len-nested-matcher", {"$len": {"$gte": 2}}, [1, 2, 3], True),
    ("len-nested-matcher-fails", {"$len": {"$gte": 4}}, [1, 2, 3], False),
    # $gte / $lte
    ("gte-above", {"$gte": 1}, 5, True),
    ("gte-equal", {"$gte": 1}, 1, True),
    ("gte-equal-float", {"$gte": 1}, 1.0, True),
    ("gte-below", {"$gte": 1}, 0, False),
    ("gte-tolerance", {"$gte": 0.3 + 1e-12}, 0.3, True),
    ("lte-tolerance", {"$lte": 0.3 - 1e-12}, 0.3, True),
    ("gte-outside-tolerance", {"$gte": 0.3 + 1e-6}, 0.3, False),
    ("lte-below", {"$lte": 20}, 7, True),
    ("lte-above", {"$lte": 20}, 21, False),
    ("range-inside", {"$gte": 1, "$lte": 20}, 20, True),
    ("range-below", {"$gte": 1, "$lte": 20}, 0, False),
    ("range-above", {"$gte": 1, "$lte": 20}, 20.5, False),
    ("gte-string", {"$gte": 1}, "5", False),
    ("gte-bool", {"$gte": 0}, True, False),
    ("gte-null", {"$gte": 0}, None, False),
    ("gte-non-number-limit", {"$gte": "a"}, "b", False),
    # $regex: searched, not anchored
    ("regex-search", {"$regex": "tool.*required"}, "step x: tool is required", True),
    ("regex-anchored-fails", {"$regex": "^required"}, "tool is required", False),
    ("regex-flags", {"$regex": "(?i)TOOL"}, "tool", True),
    ("regex-no-match", {"$regex": "xyz"}, "abc", False),
    ("regex-non-string", {"$regex": "1"}, 1, False),
    ("regex-invalid", {"$regex": "("}, "(", False),
    # $type
    ("type-string", {"$type": "string"}, "x", True),
    ("type-string-vs-number", {"$type": "string"}, 1, False),
    ("type-number-int", {"$type": "number"}, 1, True),
    ("type-number-float", {"$type": "number"}, 1.5, True),
    ("type-number-bool", {"$type": "number"}, True, False),
    ("type-integer", {"$type": "integer"}, 3, True),
    ("type-integer-whole-float", {"$type": "integer"}, 3.0, True),
    ("type-integer-fraction", {"$type": "integer"}, 3.5, False),
    ("type-integer-bool", {"$type": "integer"}, False, False),
    ("type-boolean", {"$type": "boolean"}, False, True),
    ("type-boolean-int", {"$type": "boolean"}, 0, False),
    ("type-null", {"$type": "null"}, None, True),
    ("type-null-vs-string", {"$type": "null"}, "null", False),
    ("type-object", {"$type": "object"}, {}, True),
    ("type-object-vs-list", {"$type": "object"}, [], False),
    ("type-array", {"$type": "array"}, [], True),
    ("type-array-vs-object", {"$type": "array"}, {}, False),
    ("type-unknown", {"$type": "float"}, 1.5, False),
    # $contains
    ("contains-some", {"$contains": {"id": 2}}, [{"id": 1}, {"id": 2, "x": 0}], True),
    ("contains-none", {"$contains": {"id": 3}}, [{"id": 1}, {"id": 2}], False),
    ("contains-scalar", {"$contains": 2}, [1, 2, 3], True),
    ("contains-empty-list", {"$contains": 1}, [], False),
    ("contains-not-a-list", {"$contains": "a"}, "abc", False),
    ("contains-bool-strict", {"$contains": 1}, [True], False),
    # combinations and nesting
    ("combined-len-contains", {"$len": 2, "$contains": 5}, [4, 5], True),
    ("combined-one-fails", {"$len": 3, "$contains": 5}, [4, 5], False),
    ("combined-type-regex", {"$type": "string", "$regex": "^a"}, "abc", True),
    ("matcher-in-map", {"v": {"$gte": 1, "$lte": 20}, "s": "x"}, {"v": 7, "s": "x"}, True),
    ("matcher-in-map-fails", {"v": {"$gte": 1, "$lte": 20}}, {"v": 70}, False),
    ("matcher-missing-key", {"v": {"$type": "null"}}, {}, False),
    ("matcher-in-list", [{"$type": "integer"}, {"$regex": "b"}], [1, "abc"], True),
    ("unknown-matcher", {"$between": [1, 2]}, 1, False),
]


@pytest.mark.parametrize(
    ("expected", "actual", "matches"),
    [pytest.param(e, a, m, id=i) for i, e, a, m in CASES],
)
def test_match(expected: Any, actual: Any, matches: bool) -> None:
    problems = match(expected, actual)
    if matches:
        assert problems == []
    else:
        assert problems, "expected at least one mismatch"
        assert all(isinstance(p, str) and p for p in problems)


def test_case_ids_are_unique() -> None:
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


# (id, expected, actual, path, substrings every message must contain, number of mismatches)
MESSAGES: list[tuple[str, Any, Any, str, list[str], int]] = [
    ("missing-key", {"a": {"b": 1}}, {"a": {"c": 1}}, "$", ["$.a.b", "missing", "c"], 1),
    ("wrong-value", {"total": 35}, {"total": 34}, "validate", ["validate.total", "35", "34"], 1),
    ("list-index", [1, {"x": 2}], [1, {"x": 3}], "$", ["$[1].x", "2", "3"], 1),
    ("list-length", [1, 2], [1], "$", ["$", "2 element(s)", "got 1"], 1),
    ("odd-key", {"a b": 1}, {"a b": 2}, "$", ['$["a b"]'], 1),
    ("every-mismatch", {"a": 1, "b": 2, "c": 3}, {"a": 0, "b": 0, "c": 3}, "$", ["$."], 2),
    ("both-bounds", {"$gte": 5, "$lte": 1}, 3, "$.v", ["$.v", "$gte", "$lte"], 2),
    ("bool-int", {"ok": True}, {"ok": 1}, "$", ["$.ok", "true", "1"], 1),
    ("unknown-matcher", {"$nope": 1}, 1, "$", ["$nope"], 1),
    ("long-actual-shortened", "x", "y" * 500, "$", ["..."], 1),
]


@pytest.mark.parametrize(
    ("expected", "actual", "path", "needles", "count"),
    [pytest.param(e, a, p, n, c, id=i) for i, e, a, p, n, c in MESSAGES],
)
def test_messages(expected: Any, actual: Any, path: str, needles: list[str], count: int) -> None:
    problems = match(expected, actual, path)
    assert len(problems) == count, problems
    for problem in problems:
        assert problem.startswith(path), problem
        assert len(problem) < 400, problem
    if count == 1:
        for needle in needles:
            assert needle in problems[0], (needle, problems[0])
    else:
        joined = " | ".join(problems)
        for needle in needles:
            assert needle in joined, (needle, joined)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"$len": 1}, True),
        ({"$gte": 1, "$lte": 2}, True),
        ({}, False),
        ({"$len": 1, "a": 1}, False),
        ({"a": 1}, False),
        ([{"$len": 1}], False),
        ("$len", False),
        ({1: "x"}, False),
    ],
)
def test_is_matcher(value: Any, expected: bool) -> None:
    assert is_matcher(value) is expected


def test_match_does_not_modify_inputs() -> None:
    expected = {"a": [1, {"$gte": 1}], "b": {"c": None}}
    actual = {"a": [1, 5], "b": {"c": None, "d": 1}}
    before = (repr(expected), repr(actual))
    assert match(expected, actual) == []
    assert (repr(expected), repr(actual)) == before
