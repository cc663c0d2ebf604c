"""Pulsar's schema compatibility strategies (pure): may a new schema join a topic's versions?

Reader/writer compatibility of Avro-defined schemas (AVRO, JSON, PROTOBUF) is decided by the `avro`
package (Apache Avro's own Python implementation of the specification's schema resolution rules),
as Pulsar decides it with Avro's Java SchemaValidator:
  BACKWARD  the new schema reads data written with the existing one(s)  (new = reader)
  FORWARD   the existing schema(s) read data written with the new one    (new = writer)
  FULL      both
The plain strategies compare with the latest version, the *_TRANSITIVE ones with every version.
Other types are compatible with a version of the same type; a change of type is incompatible under
every strategy but ALWAYS_COMPATIBLE. KEY_VALUE checks its key and value schemas apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from impl.broker.schema.model import AVRO_DEFINED, IncompatibleSchema, SchemaData, parse_avro, split_key_value

STRATEGIES = (
    "ALWAYS_COMPATIBLE",
    "ALWAYS_INCOMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)
DEFAULT_STRATEGY = "FULL"  # Pulsar's broker default (schemaCompatibilityStrategy=FULL)


def check_strategy(name: str) -> str:
    if name not in STRATEGIES:
        raise ValueError(f"unknown schema compatibility strategy {name!r}; one of {', '.join(STRATEGIES)}")
    return name


def _can_read(reader: SchemaData, writer: SchemaData, what: str) -> None:
    result = ReaderWriterCompatibilityChecker().get_compatibility(parse_avro(reader), parse_avro(writer))
    if result.compatibility is not SchemaCompatibilityType.compatible:
        kinds = ", ".join(sorted(i.value for i in result.incompatibilities))
        at = ", ".join(sorted(result.locations))
        raise IncompatibleSchema(f"{what}: {kinds} at {at} ({', '.join(sorted(map(str, result.messages)))})")


def _check_pair(new: SchemaData, old: SchemaData, strategy: str, version: int) -> None:
    if new.type != old.type:
        raise IncompatibleSchema(
            f"Incompatible schema: exists schema type {old.type} (version {version}), new schema type {new.type}"
        )
    if new.type == "KEY_VALUE":
        (nk, nv), (ok, ov) = split_key_value(new), split_key_value(old)
        _check_pair(nk, ok, strategy, version)
        _check_pair(nv, ov, strategy, version)
        return
    if new.type not in AVRO_DEFINED:
        return  # same primitive (or PROTOBUF_NATIVE) type: Pulsar's default check accepts it
    base = strategy.removesuffix("_TRANSITIVE")
    if base in ("BACKWARD", "FULL"):
        _can_read(new, old, f"{strategy}: the new schema cannot read data written with version {version}")
    if base in ("FORWARD", "FULL"):
        _can_read(old, new, f"{strategy}: version {version} cannot read data written with the new schema")


def check(new: SchemaData, existing: Sequence[tuple[int, SchemaData]], strategy: str) -> None:
    """Raise IncompatibleSchema (its message names the rule broken) unless `new` may be added after
    `existing` (version, schema) pairs, oldest first, under `strategy`."""
    check_strategy(strategy)
    if not existing or strategy == "ALWAYS_COMPATIBLE":
        return
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchema("ALWAYS_INCOMPATIBLE: the topic's schema may not change")
    against = existing if strategy.endswith("_TRANSITIVE") else existing[-1:]
    for version, old in reversed(against):
        _check_pair(new, old, strategy, version)
