"""The TLA+ value parser on the values TLC prints, including the awkward ones."""

from __future__ import annotations

import json

import pytest

from conformance.tla_values import Function, ModelValue, Record, TlaValueError, from_json, parse_value, to_json


def test_scalars() -> None:
    assert parse_value("42") == 42
    assert parse_value("-1") == -1
    assert parse_value("TRUE") is True
    assert parse_value("FALSE") is False
    assert parse_value("b1") == ModelValue("b1")
    assert parse_value('"none"') == "none"


def test_string_with_escapes_and_tla_syntax_inside() -> None:
    assert parse_value(r'"a \"quoted\" |-> <<x>> \\ end"') == 'a "quoted" |-> <<x>> \\ end'
    assert parse_value('"line\\nbreak"') == "line\nbreak"


def test_empty_collections() -> None:
    assert parse_value("<<>>") == ()
    assert parse_value("{}") == frozenset()
    assert parse_value("[]") == Record.of({})


def test_nested_record_in_function_in_sequence() -> None:
    text = (
        '<< ( b1 :> [state |-> "open", ledgers |-> <<1, 2>>, current |-> 2] @@\n'
        '  b2 :> [state |-> "closed", ledgers |-> <<>>, current |-> 0] ), {<<1, -2>>, <<>>} >>'
    )
    value = parse_value(text)
    assert isinstance(value, tuple) and len(value) == 2
    ml, pairs = value
    assert isinstance(ml, Function)
    b1, b2 = ml[ModelValue("b1")], ml[ModelValue("b2")]
    assert isinstance(b1, Record) and isinstance(b2, Record)
    assert b1["ledgers"] == (1, 2)
    assert b2["state"] == "closed"
    assert pairs == frozenset({(1, -2), ()})


def test_records_compare_regardless_of_field_order_and_live_in_sets() -> None:
    a = parse_value("[x |-> 1, y |-> {a, b}]")
    b = parse_value("[y |-> {b, a}, x |-> 1]")
    assert a == b
    assert len(parse_value("{[x |-> 1, y |-> 2], [y |-> 2, x |-> 1], [x |-> 2, y |-> 2]}")) == 2  # type: ignore[arg-type]
    assert isinstance(a, Record) and dict(a) == {"x": 1, "y": frozenset({ModelValue("a"), ModelValue("b")})}


def test_function_keys_distinguish_booleans_from_integers() -> None:
    f = parse_value('(1 :> "one" @@ TRUE :> "yes")')
    assert isinstance(f, Function)
    assert f[1] == "one"
    assert f[True] == "yes"


def test_json_round_trip_is_lossless() -> None:
    text = '[name |-> "AddEntry", params |-> [broker |-> b1, ledger |-> 1, set |-> {1, 2}, f |-> (1 :> <<TRUE>>)]]'
    value = parse_value(text)
    assert from_json(json.loads(json.dumps(to_json(value)))) == value


@pytest.mark.parametrize("bad", ["", "<<1, 2", "[x |-> ]", "[x = 1]", "(1 :> 2", '"open', "1 2", "<<1,, 2>>", "-"])
def test_malformed_values_give_a_typed_error_saying_where(bad: str) -> None:
    with pytest.raises(TlaValueError, match="not a TLA\\+ value: expected"):
        parse_value(bad)


def test_an_interval_set_parses_as_its_elements() -> None:
    from conformance.tla_values import Record, parse_value

    assert parse_value("[ledgers |-> 1..3, none |-> 1..0]") == Record.of(
        {"ledgers": frozenset({1, 2, 3}), "none": frozenset()}
    )
