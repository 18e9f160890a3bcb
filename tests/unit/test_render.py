"""Template rendering (DSL section 9): milepost.playbook.render, its templates and coercion."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from milepost.errors import TemplateError, UndefinedValue
from milepost.playbook.coercion import coerce, is_template
from milepost.playbook.loop_result import LoopResult
from milepost.playbook.render import check_when, render_value, render_when
from milepost.playbook.templates import compile_cache_info

WHERE = "step 'end': input 'result'"


def context() -> dict[str, Any]:
    """A fresh render context per test: renders must never mutate it."""
    return {
        "workload": {"n": 3, "name": "Ada", "nested": {"deep": 1}},
        "initial_value": 7,
        "start": {"items": [1, 2, 3], "count": 3},
        "plain": {"a": 1},
        "enveloped": {"data": {"x": 10}, "status": "ok"},
        "eval_flag": {"is_hot": True},
        "text_number": "42",
        "text_true": "true",
        "a_dict": {"k": None, "t": True},
        "probe": LoopResult([{"v": 1}, {"v": 2}, {"v": 3}], failed=1),
        "ctx": {"pages": 2},
        "none_value": None,
        "b": {"x": "from_b"},
        "unicode": "é✓",
        "encoded": "aMOpbGxv",  # base64 of "héllo"
    }


def render(template: Any, mode: str = "strict") -> Any:
    return render_value(template, context(), where=WHERE, mode=mode)


# --------------------------------------------------------------------------------------------
# 9.3: values and types


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ start.items }}", [1, 2, 3]),
        ("{{ initial_value }}", 7),
        ("  {{ initial_value }}\n", 7),
        ("{{- initial_value -}}", 7),
        ("{{ workload.nested }}", {"deep": 1}),
        ("{{ eval_flag.is_hot }}", True),
        ("{{ none_value }}", None),
        ("{{ initial_value * 2 }}", 14),
        ("{{ initial_value / 2 }}", 3.5),
        ("{{ [initial_value, 'a'] }}", [7, "a"]),
        ("{{ {'a': {'b': initial_value}} }}", {"a": {"b": 7}}),
        ("{{ workload.name }}", "Ada"),
        ("{{ text_number }}", 42),  # a string value is coerced like rendered text
        ("{{ text_true }}", True),
        ("{{ -initial_value }}", -7),
    ],
)
def test_single_expression_yields_native_value(template: str, expected: Any) -> None:
    result = render(template)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("x {{ initial_value }}", "x 7"),
        ("{{ initial_value }}{{ initial_value }}", 77),
        ("{{ initial_value }}.5", 7.5),
        ("[{{ initial_value }}, 2]", [7, 2]),
        ('{"v": {{ initial_value }}, "s": "{{ workload.name }}"}', {"v": 7, "s": "Ada"}),
        ("{{ a_dict }} ", {"k": None, "t": True}),  # Python repr parsed via literal_eval
        ("{% if eval_flag.is_hot %}true{% else %}false{% endif %}", True),
        ("{% if false %}x{% endif %}", None),
        ("{{ '' }} null", None),
        ("{{ 'None' }}", None),
        ("{{ 'False' }}", False),
        ("{{ '{not json}' }}", "{not json}"),
        ("{{ '007' }}", "007"),
        ("{{ workload.name }} and {{ workload.name }}", "Ada and Ada"),
        ("{{ unicode }}!", "é✓!"),
    ],
)
def test_rendered_text_is_coerced(template: str, expected: Any) -> None:
    result = render(template)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    "value",
    ["2", "true", "null", "[1, 2]", "", "plain text", "{# a comment #}", 2, 2.5, True, None],
)
def test_untemplated_values_keep_their_yaml_type(value: Any) -> None:
    result = render(value)
    assert result == value
    assert type(result) is type(value)


def test_render_is_recursive_and_never_renders_keys() -> None:
    value = {
        "{{ initial_value }}": "{{ initial_value }}",
        "list": ["{{ workload.name }}", "lit", 5, {"inner": "{{ start.count }}"}],
        "tuple": ("{{ initial_value }}",),
    }
    assert render(value) == {
        "{{ initial_value }}": 7,
        "list": ["Ada", "lit", 5, {"inner": 3}],
        "tuple": (7,),
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42),
        (" -17 \n", -17),
        ("0", 0),
        ("3.25", 3.25),
        ("1e3", 1000.0),
        ("true", True),
        ("True", True),
        ("false", False),
        ("False", False),
        ("", None),
        ("   ", None),
        ("null", None),
        ("None", None),
        ('{"a": [1, null]}', {"a": [1, None]}),
        (" [1, 2] ", [1, 2]),
        ("{'a': None, 'b': (1, 2)}", {"a": None, "b": (1, 2)}),
        ("TRUE", "TRUE"),
        ("007", "007"),
        ("1_000", "1_000"),
        ("1e999", "1e999"),
        ("nan", "nan"),
        ("{1, 2}", "{1, 2}"),
        ("[unclosed", "[unclosed"),
        ("{not: json}", "{not: json}"),
        ("  padded text  ", "  padded text  "),
        ("12 monkeys", "12 monkeys"),
    ],
)
def test_coerce(text: str, expected: Any) -> None:
    result = coerce(text)
    assert result == expected
    assert type(result) is type(expected)


@given(st.integers(), st.sampled_from(["", " ", "\n", "\t "]))
def test_coerce_round_trips_integers(number: int, pad: str) -> None:
    result = coerce(f"{pad}{number}{pad}")
    assert result == number
    assert type(result) is int


@given(st.booleans(), st.booleans())
def test_coerce_round_trips_booleans(value: bool, json_spelling: bool) -> None:
    text = json.dumps(value) if json_spelling else str(value)
    assert coerce(text) is value


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_coerce_round_trips_floats(number: float) -> None:
    result = coerce(json.dumps(number))
    assert result == number


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("{{ x }}", True),
        ("{% if x %}{% endif %}", True),
        ("{ x }", False),
        ("{# c #}", False),
        ("", False),
        (3, False),
        (None, False),
        (["{{ x }}"], False),
    ],
)
def test_is_template(value: object, expected: bool) -> None:
    assert is_template(value) is expected


# --------------------------------------------------------------------------------------------
# 9.2: lookups and the .data alias


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ start.items }}", [1, 2, 3]),  # the key, not dict.items
        ("{{ start['items'] }}", [1, 2, 3]),
        ("{{ plain.get('a') }}", 1),  # methods are reachable when no key shadows them
        ("{{ plain.keys() | list }}", ["a"]),
        ("{{ plain.data.a }}", 1),  # .data alias on a mapping without `data`
        ("{{ plain.data }}", {"a": 1}),
        ("{{ eval_flag.data.is_hot }}", True),
        ("{{ enveloped.data.x }}", 10),  # a real `data` key wins over the alias
        ("{{ enveloped.data }}", {"x": 10}),
        ("{{ plain['data'] is defined }}", False),  # the alias is attribute-style only
    ],
)
def test_mapping_lookup(template: str, expected: Any) -> None:
    assert render(template) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ probe }}", [{"v": 1}, {"v": 2}, {"v": 3}]),
        ("{{ probe.results | length }}", 3),
        ("{{ probe.data[1].v }}", 2),
        ("{{ probe.stats }}", {"total": 3, "success": 2, "failed": 1}),
        ("{{ probe.stats.success }}", 2),
        ("{{ probe['stats'].failed }}", 1),
        ("{{ probe['results'][0].v }}", 1),
        ("{{ probe.get('data') | length }}", 3),
        ("{{ probe[2].v }}", 3),
        ("{{ probe | map(attribute='v') | sum }}", 6),
    ],
)
def test_loop_result_in_templates(template: str, expected: Any) -> None:
    assert render(template) == expected


def test_loop_result_python_api() -> None:
    result = LoopResult([1, 2, 3], failed=1)
    assert result.results is result
    assert result.data is result
    assert result.stats == {"total": 3, "success": 2, "failed": 1}
    assert result.get("results") is result
    assert result.get("data") is result
    assert result.get("stats") == {"total": 3, "success": 2, "failed": 1}
    assert result.get("nope", "dflt") == "dflt"
    assert result.get(0) is None
    assert result["results"] is result
    assert result["data"] is result
    assert result["stats"]["failed"] == 1
    assert result[0] == 1
    assert result[-1] == 3
    assert result[1:] == [2, 3]
    with pytest.raises(KeyError):
        result["other"]
    assert result == [1, 2, 3]
    assert LoopResult().stats == {"total": 0, "success": 0, "failed": 0}


@pytest.mark.parametrize(
    "clone",
    [
        lambda r: pickle.loads(pickle.dumps(r)),
        lambda r: pickle.loads(pickle.dumps(r, protocol=0)),
        copy.copy,
        copy.deepcopy,
    ],
)
def test_loop_result_survives_pickle_and_copy(clone: Any) -> None:
    original = LoopResult([{"a": 1}, None], failed=1)
    restored = clone(original)
    assert type(restored) is LoopResult
    assert restored == [{"a": 1}, None]
    assert restored.failed == 1
    assert restored.stats == {"total": 2, "success": 1, "failed": 1}


def test_loop_result_dumps_as_plain_list() -> None:
    assert json.dumps(LoopResult([1, {"a": 2}], failed=1)) == '[1, {"a": 2}]'


def test_rendering_keeps_a_loop_result() -> None:
    rendered = render(LoopResult(["{{ initial_value }}"], failed=1))
    assert type(rendered) is LoopResult
    assert rendered == [7]
    assert rendered.failed == 1


# --------------------------------------------------------------------------------------------
# 9.4: undefined names


def test_strict_undefined_message_shape() -> None:
    with pytest.raises(UndefinedValue) as info:
        render_value("{{ result }}", {}, where=WHERE)
    assert (
        str(info.value) == "step 'end': input 'result': undefined name 'result' in '{{ result }}'"
    )
    assert info.value.code == "undefined"


@pytest.mark.parametrize(
    ("template", "name"),
    [
        ("{{ result }}", "result"),
        ("{{ result.data.x }}", "result"),
        ("{{ workload.missing.deeper }}", "missing"),  # the missing link of a chain
        ("total: {{ missing_total }}", "missing_total"),
        ("{{ missing_number + 1 }}", "missing_number"),
        ("{{ missing_fn() }}", "missing_fn"),
        ("{{ [1, missing_item] }}", "missing_item"),
        ("{{ 'a' ~ missing_suffix }}", "missing_suffix"),
        ("{{ missing_obj | tojson }}", "missing_obj"),
        ("{{ plain['data'] }}", "data"),
    ],
)
def test_strict_undefined_raises_with_name(template: str, name: str) -> None:
    with pytest.raises(UndefinedValue) as info:
        render(template)
    message = str(info.value)
    assert message == f"{WHERE}: undefined name '{name}' in '{template}'"
    assert info.value.fields["name"] == name


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ a.x if a else b.x }}", "from_b"),
        ("{{ ctx.x | default([]) }}", []),
        ("{{ ctx.pages | default(0) + 1 }}", 3),
        ("{{ ctx.missing | default(0) + 1 }}", 1),
        ("{{ missing is defined }}", False),
        ("{{ missing.deeper.still is defined }}", False),
        ("{{ missing is not defined }}", True),
        ("{{ missing | default('d') }}", "d"),
        ("{{ 'yes' if missing else 'no' }}", "no"),
        ("{% for i in missing %}{{ i }}{% endfor %}x", "x"),
        ("{{ missing == none }}", False),
    ],
)
def test_undefined_is_falsy_chains_and_defaults_in_strict_mode(
    template: str, expected: Any
) -> None:
    result = render(template)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ missing }}", None),
        ("{{ missing.deeper.still }}", None),
        ("{{ missing + 1 }}", None),
        ("count: {{ missing }}", "count: "),
        ("{{ missing }}{{ missing }}", None),  # '' coerces to null
        ("{{ [1, missing] }}", [1, None]),
        ("{{ {'k': missing} }}", {"k": None}),
        ("{{ missing | tojson }}", None),  # tojson prints an undefined as null
        ("{{ ctx.pages }}", 2),
    ],
)
def test_set_mode_undefined_becomes_null(template: str, expected: Any) -> None:
    assert render(template, mode="set") == expected


@pytest.mark.parametrize(
    "template", ["{{ 1 / 0 }}", "{{ 'a' + 1 }}", "{{ x", "{{ '{bad' | fromjson }}"]
)
@pytest.mark.parametrize("mode", ["strict", "set"])
def test_other_errors_raise_template_error(template: str, mode: str) -> None:
    with pytest.raises(TemplateError) as info:
        render(template, mode=mode)
    assert not isinstance(info.value, UndefinedValue)
    assert str(info.value).startswith(f"{WHERE}: ")
    assert f"in '{template}'" in str(info.value)


def test_strict_mode_does_not_leak_into_later_renders() -> None:
    with pytest.raises(UndefinedValue):
        render("x {{ missing }}")
    assert render("x {{ missing }}", mode="set") == "x "
    assert render_when("{{ missing }} y", context(), where=WHERE) is True


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="mode"):
        render("{{ initial_value }}", mode="lenient")


# --------------------------------------------------------------------------------------------
# when


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        ("{{ eval_flag.is_hot }}", True),
        ("{{ not eval_flag.is_hot }}", False),
        ("{{ ctx.pages > 1 }}", True),
        ("{{ missing is not defined }}", True),
        ("{{ missing is defined }}", False),
        ("{{ missing }}", False),
        ("{{ missing.deep.chain }}", False),
        ("{{ missing > 1 }}", False),  # undefined comparison is an error -> false
        ("{{ 1 / 0 }}", False),
        ("{{ x", False),
        ("{{ ''.__class__ }}", False),
        ("{{ 'false' }}", False),
        ("{{ 'true' }}", True),
        ("{% if eval_flag.is_hot %}true{% endif %}", True),
        ("{{ start.items }}", True),
        ("{{ [] }}", False),
        ("{{ 0 }}", False),
        ("false", False),  # a literal string guard is coerced too
        ("true", True),
        ("{{ probe.stats.failed == 1 }}", True),
    ],
)
def test_render_when(value: Any, expected: bool) -> None:
    assert render_when(value, context(), where="arc") is expected


@pytest.mark.parametrize(
    ("value", "reason_contains"),
    [
        ("{{ eval_flag.is_hot }}", None),
        ("{{ missing }}", "undefined name 'missing'"),
        ("{{ 1 / 0 }}", "ZeroDivisionError"),
    ],
)
def test_check_when_reports_why_a_guard_was_forced_false(
    value: str, reason_contains: str | None
) -> None:
    _, reason = check_when(value, context(), where="arc to 'x'")
    if reason_contains is None:
        assert reason is None
    else:
        assert reason is not None
        assert reason.startswith("arc to 'x': ")
        assert reason_contains in reason


# --------------------------------------------------------------------------------------------
# filters and the sandbox


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ workload.nested | tojson }}", {"deep": 1}),
        ("x{{ workload.nested | tojson }}", 'x{"deep": 1}'),
        ("x{{ unicode | tojson }}", 'x"é✓"'),  # non-ASCII kept, no \\u escapes
        ("x{{ '<&>' | tojson }}", 'x"<&>"'),  # not HTML-escaped
        ("{{ '{\"a\": [1, 2]}' | fromjson }}", {"a": [1, 2]}),
        ("{{ workload.nested | fromjson }}", {"deep": 1}),  # already parsed: unchanged
        ("{{ 'héllo' | b64encode }}", "aMOpbGxv"),
        ("{{ encoded | b64decode }}", "héllo"),
        ("{{ workload.name | upper }}", "ADA"),
        ("{{ start.items | join('-') }}", "1-2-3"),
        ("{{ start.items | length }}", 3),
        ("{{ range(3) | list }}", [0, 1, 2]),
    ],
)
def test_filters(template: str, expected: Any) -> None:
    assert render(template) == expected


@pytest.mark.parametrize(
    "template",
    [
        "{{ ''.__class__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "x {{ workload.__class__ }}",
        "{{ probe.__reduce__() }}",
        "{{ range.__globals__ }}",
        "{{ cycler.__init__.__globals__ }}",
    ],
)
@pytest.mark.parametrize("mode", ["strict", "set"])
def test_sandbox_blocks_escapes(template: str, mode: str) -> None:
    with pytest.raises(TemplateError, match="unsafe"):
        render(template, mode=mode)


# --------------------------------------------------------------------------------------------
# purity and caching


def test_rendering_does_not_mutate_the_context() -> None:
    ctx = context()
    snapshot = copy.deepcopy(ctx)
    render_value(
        {"a": "{{ start.items }}", "b": "{% set x = 1 %}{{ x }}", "c": "{{ missing }}"},
        ctx,
        where=WHERE,
        mode="set",
    )
    assert ctx == snapshot


def test_compiled_templates_are_cached() -> None:
    template = "{{ initial_value + 1000 }} cache probe"
    render(template)
    before = compile_cache_info()
    assert render(template) == "1007 cache probe"
    after = compile_cache_info()
    assert after["hits"] == before["hits"] + 1
    assert after["misses"] == before["misses"]
    assert 0 < after["size"] <= after["max_size"]


@pytest.mark.parametrize(
    "value",
    [7, "42", "text", None, [1, {"a": 2}], {"k": [3]}, 1.5, True, LoopResult([1, 2], failed=1)],
)
def test_a_plain_name_renders_as_jinja_would(value: Any) -> None:
    # `{{ name }}` is looked up without Jinja when the context has it: same result as the
    # compiled path, which `{{ (name) }}` takes
    ctx = {"probe_name_fast": value}
    fast = render_value("{{ probe_name_fast }}", ctx, where=WHERE)
    slow = render_value("{{ (probe_name_fast) }}", ctx, where=WHERE)
    assert fast == slow and type(fast) is type(slow)
    if isinstance(value, LoopResult):
        assert fast is value and fast.stats == value.stats


def test_a_plain_name_the_context_lacks_fails_like_any_undefined() -> None:
    template = "{{ probe_name_missing }}"
    with pytest.raises(UndefinedValue) as info:
        render_value(template, {}, where=WHERE)
    assert "probe_name_missing" in str(info.value)
    assert render_value(template, {}, where=WHERE, mode="set") is None
    # the same (cached) template with the name present afterwards
    assert render_value(template, {"probe_name_missing": 5}, where=WHERE) == 5
    assert render_value("{{ true }}", {"true": 0}, where=WHERE) is True  # a Jinja literal
