"""`value_type`: the dataclass of what the publish path builds for every message (pure, no I/O).

A message on its way from a producer's SEND to its receipt builds some 40 events, outputs, requests
and replies (the connection's, the managed ledger's, the ledger writer's, and each bookie's). They are
values, never changed once built, as frozen dataclasses would enforce; but a frozen dataclass's
`__init__` sets each field through `object.__setattr__`, 3-4x the cost of a plain one (0.77 against
0.20 us for six fields): some 15 us of the ~135 us of broker CPU an unbatched message took
(bench/history/pulsar.md, "Issue 46 item 4: the publish path's CPU per message"). So they are plain
dataclasses, compared and hashed on their fields as frozen ones are; nothing assigns to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform()
def value_type(cls: type[T]) -> type[T]:
    """`@dataclass(frozen=True)` without the per-field cost of its `__init__` (see the module docstring)."""
    return dataclass(unsafe_hash=True)(cls)
