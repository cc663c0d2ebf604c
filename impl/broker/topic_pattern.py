"""Topic patterns of regex subscriptions (GET_TOPICS_OF_NAMESPACE's `topics_pattern`), matched by RE2.

Python's `re` backtracks: `(a+)+` against a long name runs for minutes and holds the interpreter lock,
freezing every client of the broker. RE2 matches in time linear in the name and refuses what cannot be
matched that way (backreferences, lookaround), as Pulsar 4's `topicsPatternRegexImplementation=RE2J` does.
"""

from __future__ import annotations

from collections.abc import Callable

import re2

# Bounds what a pattern may cost to compile (RE2's own default is 8 MiB; a topic pattern needs far less).
_MAX_PROGRAM_BYTES = 1 << 20


class BadTopicsPattern(ValueError):
    """The pattern is not one RE2 accepts (syntax, lookaround, backreferences, too large)."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a client's bad pattern is the client's error, not the broker's log's
    options.max_mem = _MAX_PROGRAM_BYTES
    return options


_OPTIONS = _options()


def matcher(pattern: str) -> Callable[[str], bool]:
    """A predicate: does a topic name (its scheme stripped, as the pattern's) match the whole pattern."""
    try:
        compiled = re2.compile(pattern.split("://", 1)[-1], _OPTIONS)
    except re2.error as e:
        detail = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise BadTopicsPattern(detail) from None
    return lambda topic: compiled.fullmatch(topic.split("://", 1)[-1]) is not None
