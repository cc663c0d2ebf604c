"""TLA+ values as TLC prints them, parsed into hashable Python values.

TLC prints a counterexample state as `/\\ var = value` lines; the conformance suite replays
those states, so it needs the values, not their text.  Mapping:

    TLA+                          Python
    42, -1                        int
    TRUE, FALSE                   bool
    "text"                        str
    b1 (a model value)            ModelValue("b1")
    <<a, b>>                      tuple
    {a, b}                        frozenset
    [f |-> a, g |-> b]            Record (a read-only mapping from field name to value)
    (k1 :> v1 @@ k2 :> v2)        Function (a read-only mapping from value to value)

Values are hashable so that sets of records work.  `to_json` / `from_json` give a lossless
JSON form (tagged for the kinds JSON lacks) for trace files.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Union

Value = Union[int, bool, str, "ModelValue", tuple["Value", ...], frozenset["Value"], "Record", "Function"]


class TlaValueError(ValueError):
    """A text that is not a TLA+ value as TLC prints it; says where parsing stopped."""

    def __init__(self, text: str, position: int, expected: str) -> None:
        snippet = text[max(0, position - 20) : position + 20]
        super().__init__(f"not a TLA+ value: expected {expected} at offset {position} (near {snippet!r})")
        self.text = text
        self.position = position


@dataclass(frozen=True)
class ModelValue:
    """A TLC model value (an uninterpreted constant such as a broker id)."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Record(Mapping[str, Value]):
    """A TLA+ record; fields are kept sorted so equal records compare and hash equal."""

    fields: tuple[tuple[str, Value], ...]

    @classmethod
    def of(cls, items: Mapping[str, Value]) -> Record:
        return cls(tuple(sorted(items.items())))

    def __getitem__(self, key: str) -> Value:
        for name, value in self.fields:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self.fields)

    def __len__(self) -> int:
        return len(self.fields)


@dataclass(frozen=True)
class Function(Mapping[Value, Value]):
    """A TLA+ function printed as `(k :> v @@ ...)` (functions on 1..n print as sequences)."""

    pairs: frozenset[tuple[Value, Value]]

    @classmethod
    def of(cls, items: Mapping[Value, Value]) -> Function:
        return cls(frozenset(items.items()))

    def __getitem__(self, key: Value) -> Value:
        for k, v in self.pairs:
            if k == key and type(k) is type(key):
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[Value]:
        return (k for k, _ in self.pairs)

    def __len__(self) -> int:
        return len(self.pairs)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", '"': '"', "\\": "\\"}


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, expected: str) -> TlaValueError:
        return TlaValueError(self.text, self.pos, expected)

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self, token: str) -> bool:
        self.skip_space()
        return self.text.startswith(token, self.pos)

    def expect(self, token: str) -> None:
        if not self.peek(token):
            raise self.error(repr(token))
        self.pos += len(token)

    def value(self) -> Value:
        self.skip_space()
        if self.pos >= len(self.text):
            raise self.error("a value")
        c = self.text[self.pos]
        if self.peek("<<"):
            return tuple(self.items("<<", ">>", self.value))
        if c == "{":
            return frozenset(self.items("{", "}", self.value))
        if c == "[":
            return Record.of(dict(self.items("[", "]", self.field)))
        if c == "(":
            return self.function()
        if c == '"':
            return self.string()
        if c == "-" or c.isdigit():
            low = self.integer()
            if self.text.startswith("..", self.pos):  # an interval set, as TLC prints 1..3
                self.pos += 2
                return frozenset(range(low, self.integer() + 1))
            return low
        if c.isalpha() or c == "_":
            return self.identifier()
        raise self.error("a value")

    def items(self, open_: str, close: str, item: Any) -> list[Any]:
        self.expect(open_)
        out: list[Any] = []
        if self.peek(close):
            self.pos += len(close)
            return out
        while True:
            out.append(item())
            if self.peek(","):
                self.pos += 1
                continue
            self.expect(close)
            return out

    def field(self) -> tuple[str, Value]:
        self.skip_space()
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] == "_"):
            self.pos += 1
        if start == self.pos:
            raise self.error("a record field name")
        name = self.text[start : self.pos]
        self.expect("|->")
        return name, self.value()

    def function(self) -> Value:
        self.expect("(")
        pairs: list[tuple[Value, Value]] = []  # not a dict: 1 and TRUE must stay distinct keys
        while True:
            key = self.value()
            self.expect(":>")
            pairs.append((key, self.value()))
            if self.peek("@@"):
                self.pos += 2
                continue
            self.expect(")")
            return Function(frozenset(pairs))

    def string(self) -> str:
        self.pos += 1  # opening quote
        out: list[str] = []
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(out)
            if c == "\\" and self.pos + 1 < len(self.text):
                nxt = self.text[self.pos + 1]
                out.append(_ESCAPES.get(nxt, nxt))
                self.pos += 2
                continue
            out.append(c)
            self.pos += 1
        raise self.error("a closing '\"'")

    def integer(self) -> int:
        start = self.pos
        if self.text[self.pos] == "-":
            self.pos += 1
        digits = self.pos
        while self.pos < len(self.text) and self.text[self.pos].isdigit():
            self.pos += 1
        if digits == self.pos:
            raise self.error("digits")
        return int(self.text[start : self.pos])

    def identifier(self) -> Value:
        start = self.pos
        while self.pos < len(self.text) and (self.text[self.pos].isalnum() or self.text[self.pos] in "_"):
            self.pos += 1
        word = self.text[start : self.pos]
        if word == "TRUE":
            return True
        if word == "FALSE":
            return False
        return ModelValue(word)


def parse_value(text: str) -> Value:
    """Parse one TLA+ value as TLC prints it; TlaValueError if the text is anything else."""
    parser = _Parser(text)
    value = parser.value()
    parser.skip_space()
    if parser.pos != len(text):
        raise parser.error("the end of the value")
    return value


def to_json(value: Value) -> Any:
    """A JSON-ready form; kinds JSON lacks are tagged objects ({"set": [...]}, ...)."""
    if isinstance(value, bool | int | str):
        return value
    if isinstance(value, ModelValue):
        return {"model_value": value.name}
    if isinstance(value, tuple):
        return [to_json(v) for v in value]
    if isinstance(value, frozenset):
        return {"set": [to_json(v) for v in value]}
    if isinstance(value, Record):
        return {"record": {k: to_json(v) for k, v in value.fields}}
    if isinstance(value, Function):
        return {"function": [[to_json(k), to_json(v)] for k, v in value.pairs]}
    raise TypeError(f"not a TLA+ value: {value!r}")


def from_json(data: Any) -> Value:
    """Inverse of to_json."""
    if isinstance(data, bool | int | str):
        return data
    if isinstance(data, list):
        return tuple(from_json(v) for v in data)
    if isinstance(data, dict) and len(data) == 1:
        ((tag, body),) = data.items()
        if tag == "model_value":
            return ModelValue(body)
        if tag == "set":
            return frozenset(from_json(v) for v in body)
        if tag == "record":
            return Record.of({k: from_json(v) for k, v in body.items()})
        if tag == "function":
            return Function(frozenset((from_json(k), from_json(v)) for k, v in body))
    raise ValueError(f"not the JSON form of a TLA+ value: {data!r}")
