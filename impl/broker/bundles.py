"""Namespace bundles: which bundle a topic belongs to.

A namespace's 32-bit hash range [0, 2^32) is split into N bundles (4 by
default, Pulsar's defaultNumberOfNamespaceBundles) at multiples of 2^32 // N, the last one
ending at 2^32 (printed 0xffffffff). A topic belongs to the bundle containing the hash of
its full name (`persistent://tenant/ns/topic`, partitions included, so partitions spread).
The hash is CRC-32 (zlib's, the IEEE polynomial) of the name's UTF-8 bytes, an unsigned
32-bit number: what Pulsar's NamespaceService hashes bundles with (Guava's Hashing.crc32()),
so with the same bundle count a topic lands in the same bundle here as in Pulsar.
"""

from __future__ import annotations

import bisect
import zlib
from dataclasses import dataclass

from impl.broker import namespaces
from impl.metadata import layout
from impl.metadata.naming import NamespaceName, TopicName

DEFAULT_NUMBER_OF_BUNDLES = namespaces.DEFAULT_NUMBER_OF_BUNDLES
FULL_RANGE = layout.FULL_HASH_RANGE  # 2^32


# --- hashing and bundles (pure) ----------------------------------------------------------


def topic_hash(topic: TopicName) -> int:
    """The bundle hash of a topic: CRC-32 of its full name's UTF-8 bytes, in [0, 2^32)."""
    return zlib.crc32(str(topic).encode("utf-8"))


@dataclass(frozen=True, order=True)
class NamespaceBundle:
    """The hash range [lower, upper) of a namespace; upper is 2^32 for the last bundle."""

    namespace: NamespaceName
    lower: int
    upper: int

    def __post_init__(self) -> None:
        layout.bundle_name(self.lower, self.upper)  # raises InvalidName for an empty or out-of-range range

    @property
    def name(self) -> str:
        """0x<lo>_0x<hi>, Pulsar's bundle range notation."""
        return layout.bundle_name(self.lower, self.upper)

    @property
    def path(self) -> str:
        """The ephemeral ownership node."""
        return layout.bundle_ownership_path(self.namespace.tenant, self.namespace.namespace, self.lower, self.upper)

    def contains(self, hash_value: int) -> bool:
        return self.lower <= hash_value < self.upper

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> NamespaceBundle:
        """Parse `tenant/ns/0x<lo>_0x<hi>` (as str() prints it)."""
        namespace, _, name = text.rpartition("/")
        lower, upper = layout.parse_bundle_name(name)
        return cls(NamespaceName.parse(namespace), lower, upper)


def bundle_boundaries(count: int) -> tuple[int, ...]:
    """The count+1 boundaries splitting [0, 2^32) into `count` bundles (all but the last of equal size)."""
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= namespaces.MAX_NUMBER_OF_BUNDLES:
        raise namespaces.InvalidPolicies(
            f"a namespace needs between 1 and {namespaces.MAX_NUMBER_OF_BUNDLES} bundles, got {count!r}"
        )
    size = FULL_RANGE // count
    return (*(i * size for i in range(count)), FULL_RANGE)


def namespace_bundles(namespace: NamespaceName, count: int = DEFAULT_NUMBER_OF_BUNDLES) -> tuple[NamespaceBundle, ...]:
    bounds = bundle_boundaries(count)
    return tuple(NamespaceBundle(namespace, lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False))


def bundle_for(topic: TopicName, count: int = DEFAULT_NUMBER_OF_BUNDLES) -> NamespaceBundle:
    """The bundle of `topic` when its namespace has `count` bundles."""
    bounds = bundle_boundaries(count)
    i = bisect.bisect_right(bounds, topic_hash(topic)) - 1
    return NamespaceBundle(topic.namespace_name, bounds[i], bounds[i + 1])
