"""Topic and namespace names, as Pulsar spells them.

A topic name is `persistent://<tenant>/<namespace>/<local name>`; the short forms
`<local name>` (in `public/default`) and `<tenant>/<namespace>/<local name>` are accepted.
A partition of a partitioned topic is an ordinary topic whose local name ends with
`-partition-<N>`; the partitioned topic itself (the `base`) has no data of its own.

Validation follows Pulsar's NamedEntity rule for tenants and namespaces (letters, digits,
`-`, `=`, `:`, `.`, `_`); a local name may hold anything but `/`, control characters and
the path components `.` and `..` (Pulsar's V1 names, with a cluster part, are not
supported, so a `/` in the local name is an error rather than a cluster). The domain is
`persistent` (the default of the short forms) or `non-persistent` (docs/non-persistent.md):
a non-persistent topic has no managed ledger, so asking for one is NonPersistentNotSupported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from impl.metadata import layout

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"

# Pulsar's NamedEntity pattern: [-=:.\w]; `\w` is ASCII here so names stay portable.
_NAMED_ENTITY = re.compile(r"^[-=:.A-Za-z0-9_]+$")
_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>0|[1-9][0-9]*)$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_EXAMPLE = "persistent://public/default/my-topic (or my-topic, or public/default/my-topic)"


class InvalidTopicName(ValueError):
    """A topic name that cannot be parsed; the message says what is wrong and what a valid one looks like."""

    code = "InvalidTopicName"  # Pulsar's ServerError.InvalidTopicName


class NonPersistentNotSupported(InvalidTopicName):
    """A persistent-only thing (a managed ledger) asked of a `non-persistent://` topic."""


class InvalidNamespaceName(ValueError):
    """A tenant or namespace name outside Pulsar's allowed characters, or a malformed `tenant/ns`."""

    code = "InvalidNamespaceName"


def check_named_entity(kind: str, name: str) -> str:
    """Return `name` if it is a valid tenant or namespace name, else raise InvalidNamespaceName."""
    if not isinstance(name, str) or not _NAMED_ENTITY.match(name) or name in (".", ".."):
        raise InvalidNamespaceName(
            f"{kind} name {name!r} is invalid: use only letters, digits and - = : . _ "
            f"(e.g. 'public' or 'my-{kind}'), not empty, '.' or '..'"
        )
    return name


@dataclass(frozen=True, order=True)
class NamespaceName:
    """`tenant/namespace` (Pulsar's NamespaceName without the V1 cluster part)."""

    tenant: str
    namespace: str

    def __post_init__(self) -> None:
        check_named_entity("tenant", self.tenant)
        check_named_entity("namespace", self.namespace)

    @classmethod
    def parse(cls, name: str) -> NamespaceName:
        if not isinstance(name, str) or name.count("/") != 1:
            raise InvalidNamespaceName(
                f"namespace {name!r} is invalid: write it as tenant/namespace, e.g. public/default"
            )
        tenant, namespace = name.split("/")
        return cls(tenant, namespace)

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"


def _invalid(name: object, why: str) -> InvalidTopicName:
    return InvalidTopicName(f"invalid topic name {name!r}: {why}; a valid name looks like {_EXAMPLE}")


def _check_local_name(full: object, local: str) -> None:
    if not local:
        raise _invalid(full, "the topic's local name is empty")
    if "/" in local:
        raise _invalid(full, f"the local name {local!r} contains '/' (cluster-style V1 names are not supported)")
    if local in (".", ".."):
        raise _invalid(full, f"the local name cannot be {local!r}")
    if _CONTROL.search(local):
        raise _invalid(full, "the local name contains a control character")
    try:
        local.encode("utf-8")  # bundles hash the UTF-8 bytes of the name
    except UnicodeEncodeError:
        raise _invalid(full, "the local name is not valid Unicode (a lone surrogate)") from None
    suffix = local.rsplit(PARTITION_SUFFIX, 1)[1] if PARTITION_SUFFIX in local else ""
    if suffix.isascii() and suffix.isdigit() and _PARTITION.match(local) is None:
        # "t-partition-01": an index must be canonical, or t-partition-01 and t-partition-1 would be one partition.
        raise _invalid(full, "a partition suffix must be -partition-N with N a decimal without leading zeros")


@dataclass(frozen=True, order=True)
class TopicName:
    """A parsed, validated topic name. `str(t)` is its full name; `TopicName.parse(str(t)) == t`."""

    tenant: str
    namespace_portion: str
    local_name: str
    domain: str = PERSISTENT  # or NON_PERSISTENT

    def __post_init__(self) -> None:
        full = f"{self.domain}://{self.tenant}/{self.namespace_portion}/{self.local_name}"
        if self.domain not in (PERSISTENT, NON_PERSISTENT):
            raise _invalid(full, f"unknown domain {self.domain!r} (use 'persistent' or 'non-persistent')")
        try:
            check_named_entity("tenant", self.tenant)
            check_named_entity("namespace", self.namespace_portion)
        except InvalidNamespaceName as e:
            raise _invalid(full, str(e)) from None
        _check_local_name(full, self.local_name)

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse a full or short topic name (short forms are persistent); raises InvalidTopicName."""
        if not isinstance(name, str):
            raise _invalid(name, f"a topic name is a string, not {type(name).__name__}")
        if not name:
            raise _invalid(name, "the name is empty")
        domain = PERSISTENT
        if "://" in name:
            domain, rest = name.split("://", 1)
            if domain not in (PERSISTENT, NON_PERSISTENT):
                raise _invalid(name, f"unknown domain {domain!r} (use 'persistent' or 'non-persistent')")
        elif name.count("/") == 0:
            rest = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}/{name}"
        elif name.count("/") == 2:
            rest = name
        else:
            raise _invalid(name, "a short name is either 'topic' or 'tenant/namespace/topic'")
        parts = rest.split("/", 2)
        if len(parts) != 3:
            raise _invalid(name, "it needs tenant, namespace and topic parts")
        tenant, namespace, local = parts
        return cls(tenant, namespace, local, domain)

    @classmethod
    def of(cls, namespace: NamespaceName | str, local_name: str, domain: str = PERSISTENT) -> TopicName:
        ns = namespace if isinstance(namespace, NamespaceName) else NamespaceName.parse(namespace)
        return cls(ns.tenant, ns.namespace, local_name, domain)

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace_portion}/{self.local_name}"

    @property
    def persistent(self) -> bool:
        return self.domain == PERSISTENT

    @property
    def namespace(self) -> str:
        """`tenant/namespace`, as Pulsar's TopicName.getNamespace()."""
        return f"{self.tenant}/{self.namespace_portion}"

    @property
    def namespace_name(self) -> NamespaceName:
        return NamespaceName(self.tenant, self.namespace_portion)

    @property
    def partition(self) -> int | None:
        """The partition index if this is a partition (`...-partition-N`), else None."""
        match = _PARTITION.match(self.local_name)
        return None if match is None else int(match.group("index"))

    @property
    def is_partition(self) -> bool:
        return self.partition is not None

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to; the topic itself if it is no partition."""
        match = _PARTITION.match(self.local_name)
        if match is None:
            return self
        return TopicName(self.tenant, self.namespace_portion, match.group("base"), self.domain)

    def partition_name(self, index: int) -> TopicName:
        """Partition `index` of this (base) topic: `<name>-partition-<index>`."""
        if self.is_partition:
            raise _invalid(str(self), "a partition has no partitions of its own; use its .base")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise _invalid(f"{self}{PARTITION_SUFFIX}{index}", "the partition index must be an integer >= 0")
        local = f"{self.local_name}{PARTITION_SUFFIX}{index}"
        return TopicName(self.tenant, self.namespace_portion, local, self.domain)

    @property
    def managed_ledger_name(self) -> str:
        """`tenant/namespace/persistent/<URL-encoded local name>`, as impl/metadata/layout.py lays it out
        (NonPersistentNotSupported for a non-persistent topic: it has no managed ledger)."""
        if not self.persistent:
            raise NonPersistentNotSupported(
                f"topic {self} is non-persistent: it has no managed ledger (use persistent://{self.namespace}/"
                f"{self.local_name} for a stored topic)"
            )
        return layout.managed_ledger_name(self.tenant, self.namespace_portion, self.local_name)

    @property
    def managed_ledger_path(self) -> str:
        return f"{layout.MANAGED_LEDGERS_ROOT}/{self.managed_ledger_name}"
