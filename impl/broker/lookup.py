"""Lookup: where a client asking one broker about a topic should go (a pure decision), and what
brokers publish for it.

Owner known: "connect" if it is the asking broker,
else "redirect" to it. Unowned: the broker named by a transfer's assignment hint if it is
live, else the least-loaded live broker (fewest bundles, then fewest topics, then the smallest
address, so every broker decides alike); if that is the asking broker it acquires the bundle
and answers "connect", else "redirect" marked authoritative, and the broker redirected to
acquires without choosing again (Pulsar's authoritative lookup: no ping-pong between brokers).
A transfer leaves a persistent hint /loadbalance/bundle-assignments/<tenant>/<ns>/<bundle>
naming the next owner and unloads the bundle; whoever acquires the bundle next deletes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from impl.broker.bundles import NamespaceBundle
from impl.metadata import layout
from impl.metadata.brokers import BrokerLoad
from impl.metadata.store import (
    MetadataError,
)

# --- lookup decision (pure) ----------------------------------------------------------------


class NoBrokerAvailable(MetadataError):
    """No live broker is registered, so nobody can own the bundle."""

    code = "ServiceNotReady"


class LookupFailed(MetadataError):
    """Ownership of the bundle kept changing while we looked it up."""

    code = "ServiceNotReady"


@dataclass(frozen=True)
class LookupDecision:
    """`acquire`: the asking broker should create the ownership node, then answer connect."""

    action: Literal["connect", "redirect", "acquire"]
    broker: str
    authoritative: bool = False


@dataclass(frozen=True)
class LookupResult:
    kind: Literal["connect", "redirect"]
    broker_address: str
    authoritative: bool = False  # a redirect to the broker chosen to acquire the bundle
    bundle: NamespaceBundle | None = None


def least_loaded(loads: Iterable[BrokerLoad]) -> str | None:
    """Fewest bundles, then fewest topics, then the smallest address (deterministic ties)."""
    best = min(loads, key=lambda load: (load.bundles, load.topics, load.broker), default=None)
    return None if best is None else best.broker


def decide_lookup(
    owner: str | None,
    asking: str,
    live: Mapping[str, BrokerLoad],
    assigned: str | None = None,
    authoritative: bool = False,
) -> LookupDecision:
    """Where should a client asking `asking` about a bundle go? See the module docstring."""
    if owner is not None:
        return LookupDecision("connect", owner) if owner == asking else LookupDecision("redirect", owner)
    if authoritative:
        return LookupDecision("acquire", asking)  # we were chosen by whoever redirected here
    candidate = assigned if assigned in live else least_loaded(live.values())
    if candidate is None:
        raise NoBrokerAvailable(
            f"no live broker is registered under {layout.LOADBALANCE_BROKERS}; start a broker and retry the lookup"
        )
    if candidate == asking:
        return LookupDecision("acquire", asking)
    return LookupDecision("redirect", candidate, authoritative=True)
