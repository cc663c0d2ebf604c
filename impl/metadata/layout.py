"""Every metadata path in the project, in one place (docs/protocol-rules.md).

BookKeeper (HierarchicalLedgerManager):
  - a ledger id below 2^31-1 is printed as 10 digits and split 2-4-4, the last part
    prefixed with "L": ledger 1 -> /ledgers/00/0000/L0001 (the "legacy" hierarchy);
  - larger ids are printed as 19 digits and split 3-4-4-4-4: /ledgers/000/0000/0021/4748/L3648
    (the "long" hierarchy);
  - ids come from sequential nodes /ledgers/idgen/ID-<seq> (ZkLedgerIdGenerator);
  - bookies register ephemeral /ledgers/available/<bookie-id>, read-only ones
    /ledgers/available/readonly/<bookie-id>.
Pulsar:
  - managed ledger /managed-ledgers/<tenant>/<namespace>/persistent/<topic>, cursors
    as its children;
  - bundle ownership /namespace/<tenant>/<ns>/0x<lo>_0x<hi> (8 lower-case hex digits);
  - live brokers /loadbalance/brokers/<host:port>.

Pure functions; malformed names raise `InvalidName` (an `InvalidArgument`).
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from impl.metadata.store import InvalidArgument

LEDGERS_ROOT = "/ledgers"
AVAILABLE = f"{LEDGERS_ROOT}/available"
READONLY = f"{AVAILABLE}/readonly"
IDGEN = f"{LEDGERS_ROOT}/idgen"
IDGEN_PREFIX = "ID-"
# Children of /ledgers that are not ledger hierarchy levels (BookKeeper reserves the same names).
RESERVED_LEDGER_ROOT_CHILDREN = frozenset(
    {"available", "idgen", "idgen-long", "LAYOUT", "INSTANCEID", "underreplication", "cookies"}
)

MANAGED_LEDGERS_ROOT = "/managed-ledgers"
NAMESPACE_ROOT = "/namespace"
LOADBALANCE_BROKERS = "/loadbalance/brokers"
LOADBALANCE_LEADER = "/loadbalance/leader"  # ephemeral: the address of the leader broker

# HierarchicalLedgerManager picks the legacy 2-4-4 layout for ids below Integer.MAX_VALUE.
LEGACY_ID_LIMIT = 2**31 - 1
MAX_LEDGER_ID = 2**63 - 1
FULL_HASH_RANGE = 2**32  # a namespace's bundles split [0, 2^32); the last upper bound is printed 0xffffffff

_LEGACY = re.compile(r"^/ledgers/(\d{2})/(\d{4})/L(\d{4})$")
_LONG = re.compile(r"^/ledgers/(\d{3})/(\d{4})/(\d{4})/(\d{4})/L(\d{4})$")
_BUNDLE = re.compile(r"^0x([0-9a-f]{8})_0x([0-9a-f]{8})$")


class InvalidName(InvalidArgument):
    """A name or path that cannot be part of (or parsed from) the metadata layout."""


def _component(kind: str, name: str) -> str:
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise InvalidName(f"{kind} must be a non-empty name without '/', got {name!r}")
    return name


# --- ledgers ------------------------------------------------------------------------


def ledger_path(ledger_id: int) -> str:
    """The node holding ledger `ledger_id`'s metadata."""
    if not isinstance(ledger_id, int) or isinstance(ledger_id, bool) or not 0 <= ledger_id <= MAX_LEDGER_ID:
        raise InvalidName(f"ledger id must be an integer in [0, 2^63-1], got {ledger_id!r}")
    if ledger_id < LEGACY_ID_LIMIT:
        digits = f"{ledger_id:010d}"
        return f"{LEDGERS_ROOT}/{digits[0:2]}/{digits[2:6]}/L{digits[6:10]}"
    digits = f"{ledger_id:019d}"
    return f"{LEDGERS_ROOT}/{digits[0:3]}/{digits[3:7]}/{digits[7:11]}/{digits[11:15]}/L{digits[15:19]}"


def ledger_id_from_path(path: str) -> int:
    """Parse back `ledger_path`: /ledgers/00/0000/L0001 -> 1. Raises InvalidName."""
    match = _LEGACY.match(path) or _LONG.match(path)
    if match is None:
        raise InvalidName(f"not a ledger node path: {path!r} (expected e.g. /ledgers/00/0000/L0001)")
    ledger_id = int("".join(match.groups()))
    if ledger_path(ledger_id) != path:  # e.g. a small id spelled in the long layout
        raise InvalidName(f"ledger path {path!r} is not the canonical path of ledger {ledger_id}")
    return ledger_id


def is_ledger_level(name: str) -> bool:
    """True for a first-level child of /ledgers that holds ledgers (2 digits legacy, 3 digits long)."""
    return name not in RESERVED_LEDGER_ROOT_CHILDREN and name.isdigit() and len(name) in (2, 3)


def idgen_prefix_path() -> str:
    """Create a sequential node under this prefix; its sequence number is the new ledger id."""
    return f"{IDGEN}/{IDGEN_PREFIX}"


def id_from_idgen_path(path: str) -> int:
    prefix = idgen_prefix_path()
    suffix = path[len(prefix) :]
    if not path.startswith(prefix) or not suffix.isdigit():
        raise InvalidName(f"not an id generator node: {path!r} (expected {prefix}<digits>)")
    return int(suffix)


# --- bookies --------------------------------------------------------------------------


def bookie_path(bookie_id: str, readonly: bool = False) -> str:
    """Ephemeral registration node of a bookie, writable or read-only."""
    _component("bookie id", bookie_id)
    if bookie_id == "readonly":
        raise InvalidName("'readonly' is the read-only sub-tree, not a bookie id")
    return f"{READONLY if readonly else AVAILABLE}/{bookie_id}"


# --- Pulsar -----------------------------------------------------------------------------


def managed_ledger_name(tenant: str, namespace: str, topic: str) -> str:
    """Pulsar's managed ledger name: tenant/namespace/persistent/<encoded local topic name>."""
    _component("tenant", tenant)
    _component("namespace", namespace)
    if not isinstance(topic, str) or not topic:
        raise InvalidName(f"topic must be a non-empty name, got {topic!r}")
    # The local name is URL-encoded (as Pulsar's Codec.encode), so it is one path component.
    return f"{tenant}/{namespace}/persistent/{quote(topic, safe='')}"


def managed_ledger_path(tenant: str, namespace: str, topic: str) -> str:
    return f"{MANAGED_LEDGERS_ROOT}/{managed_ledger_name(tenant, namespace, topic)}"


def parse_managed_ledger_path(path: str) -> tuple[str, str, str]:
    """Parse back `managed_ledger_path` -> (tenant, namespace, topic)."""
    parts = path.split("/")
    if len(parts) != 6 or parts[0] != "" or "/" + parts[1] != MANAGED_LEDGERS_ROOT or parts[4] != "persistent":
        raise InvalidName(f"not a managed ledger path: {path!r} (expected /managed-ledgers/T/NS/persistent/TOPIC)")
    tenant, namespace, topic = parts[2], parts[3], unquote(parts[5])
    if managed_ledger_path(tenant, namespace, topic) != path:
        raise InvalidName(f"managed ledger path {path!r} is not in canonical form")
    return tenant, namespace, topic


def cursor_path(tenant: str, namespace: str, topic: str, cursor: str) -> str:
    """A cursor's node: a child of its managed ledger's node (cursor name URL-encoded, like topics)."""
    if not isinstance(cursor, str) or not cursor:
        raise InvalidName(f"cursor name must be non-empty, got {cursor!r}")
    return f"{managed_ledger_path(tenant, namespace, topic)}/{quote(cursor, safe='')}"


def cursor_name_from_child(child: str) -> str:
    return unquote(child)


def bundle_name(lower: int, upper: int) -> str:
    """0x<lo>_0x<hi> for the hash range [lower, upper); the full-range end 2^32 prints as 0xffffffff."""
    if not (isinstance(lower, int) and isinstance(upper, int) and 0 <= lower < upper <= FULL_HASH_RANGE):
        raise InvalidName(f"bundle range must satisfy 0 <= lower < upper <= 2^32, got [{lower!r}, {upper!r})")
    return f"0x{lower:08x}_0x{min(upper, FULL_HASH_RANGE - 1):08x}"


def parse_bundle_name(name: str) -> tuple[int, int]:
    """Parse back `bundle_name` -> (lower, upper); 0xffffffff as an upper bound means 2^32."""
    match = _BUNDLE.match(name)
    if match is None:
        raise InvalidName(f"not a bundle name: {name!r} (expected 0x<8 hex>_0x<8 hex>, e.g. 0x00000000_0x40000000)")
    lower, upper = int(match.group(1), 16), int(match.group(2), 16)
    if upper == FULL_HASH_RANGE - 1:
        upper = FULL_HASH_RANGE
    if lower >= upper:
        raise InvalidName(f"bundle {name!r} has an empty range")
    return lower, upper


def namespace_path(tenant: str, namespace: str) -> str:
    return f"{NAMESPACE_ROOT}/{_component('tenant', tenant)}/{_component('namespace', namespace)}"


def bundle_ownership_path(tenant: str, namespace: str, lower: int, upper: int) -> str:
    """The ephemeral node a broker holds while it owns bundle [lower, upper) of tenant/namespace."""
    return f"{namespace_path(tenant, namespace)}/{bundle_name(lower, upper)}"


def broker_path(broker_address: str) -> str:
    """A live broker's ephemeral registration node, /loadbalance/brokers/<host:port>."""
    host, sep, port = _component("broker address", broker_address).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidName(f"broker address must be host:port, got {broker_address!r}")
    return f"{LOADBALANCE_BROKERS}/{broker_address}"


# --- Pulsar admin metadata (tenants, namespaces, partitioned topics) ------------------------

ADMIN_POLICIES = "/admin/policies"
CLUSTERS = "/admin/clusters"  # in the configuration store: /admin/clusters/<name> holds JSON ClusterData
PARTITIONED_TOPICS = "/admin/partitioned-topics"
BUNDLE_ASSIGNMENTS = "/loadbalance/bundle-assignments"


def cluster_path(cluster: str) -> str:
    """A cluster's node in the configuration store, /admin/clusters/<name> (JSON ClusterData)."""
    return f"{CLUSTERS}/{_component('cluster', cluster)}"


def tenant_policies_path(tenant: str) -> str:
    """A tenant's node, /admin/policies/<tenant> (JSON TenantInfo); its namespaces are its children."""
    return f"{ADMIN_POLICIES}/{_component('tenant', tenant)}"


def namespace_policies_path(tenant: str, namespace: str) -> str:
    """A namespace's policies node, /admin/policies/<tenant>/<ns> (JSON)."""
    return f"{tenant_policies_path(tenant)}/{_component('namespace', namespace)}"


def partitioned_topics_path(tenant: str, namespace: str, domain: str = "persistent") -> str:
    """The parent of a namespace's partitioned-topic nodes of one domain (persistent, non-persistent)."""
    if domain not in ("persistent", "non-persistent"):
        raise InvalidName(f"domain must be persistent or non-persistent, got {domain!r}")
    return f"{PARTITIONED_TOPICS}/{_component('tenant', tenant)}/{_component('namespace', namespace)}/{domain}"


def partitioned_topic_path(tenant: str, namespace: str, topic: str, domain: str = "persistent") -> str:
    """/admin/partitioned-topics/<tenant>/<ns>/<domain>/<URL-encoded topic>, holding the partition count."""
    if not isinstance(topic, str) or not topic:
        raise InvalidName(f"topic must be a non-empty name, got {topic!r}")
    return f"{partitioned_topics_path(tenant, namespace, domain)}/{quote(topic, safe='')}"


def bundle_assignment_path(tenant: str, namespace: str, lower: int, upper: int) -> str:
    """A persistent hint naming the broker that should own the bundle next (written by a transfer)."""
    return f"{BUNDLE_ASSIGNMENTS}/{_component('tenant', tenant)}/{_component('namespace', namespace)}/" + bundle_name(
        lower, upper
    )


# --- the schema registry ----------------------------------------------------------------------

SCHEMAS_ROOT = "/schemas"


def schema_locator_path(tenant: str, namespace: str, topic: str) -> str:
    """A topic's schema locator, /schemas/<tenant>/<ns>/<topic> (Pulsar's BookkeeperSchemaStorage path;
    the topic is the partitioned topic's name for its partitions, URL-encoded as managed ledgers are)."""
    if not isinstance(topic, str) or not topic:
        raise InvalidName(f"topic must be a non-empty name, got {topic!r}")
    return f"{SCHEMAS_ROOT}/{_component('tenant', tenant)}/{_component('namespace', namespace)}/{quote(topic, safe='')}"
