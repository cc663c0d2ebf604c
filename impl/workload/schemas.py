"""Typed workload (docs/history.md, Schemas): producers and consumers with a JSON or Avro schema through the
official client's `pulsar.schema` classes, one evolution mid-run, and the registry's versions at the end.

A value is a record whose field `value` holds the history's string. The evolution adds a field with a default
(null), compatible under every strategy Pulsar has but ALWAYS_INCOMPATIBLE, so producers created after it
register version 1 while the nemesis runs; consumers and readers keep the first record class (a JSON decode
ignores the added field, an Avro decode resolves each message's writer version, fetched with GET_SCHEMA).
"""

from __future__ import annotations

import threading
from typing import Any

from impl.workload.history import HistoryWriter
from impl.workload.operations import Credentials, describe

SCHEMA_KINDS = ("none", "json", "avro")


def _record_classes() -> tuple[type, type]:
    from pulsar.schema import Record, String

    # One record name for both versions: Avro resolves a writer's schema against a reader's by name.
    class WorkloadValue(Record):
        value = String(required=True)

    first = WorkloadValue

    class WorkloadValue(Record):  # type: ignore[no-redef]
        value = String(required=True)
        note = String(required_default=True)  # the evolution's added field, default null

    return first, WorkloadValue


class SchemaPlan:
    """The run's schema kind and whether the evolution happened; shared by every session of the run."""

    def __init__(self, kind: str) -> None:
        if kind not in SCHEMA_KINDS:
            raise ValueError(f"unknown schema kind {kind!r}: one of {', '.join(SCHEMA_KINDS)}")
        self.kind = kind
        self._evolved = threading.Event()
        self._classes: tuple[type, type] | None = None

    @property
    def typed(self) -> bool:
        return self.kind != "none"

    @property
    def generation(self) -> int:
        """0 before the evolution, 1 after: a producer made in an older generation is replaced."""
        return 1 if self._evolved.is_set() else 0

    def evolve(self) -> bool:
        """Switch producers to the evolved record; True the first time."""
        if self._evolved.is_set():
            return False
        self._evolved.set()
        return True

    def _record(self, generation: int) -> type:
        if self._classes is None:
            self._classes = _record_classes()
        return self._classes[generation]

    def _schema(self, record: type) -> Any:
        from pulsar.schema import AvroSchema, JsonSchema

        return JsonSchema(record) if self.kind == "json" else AvroSchema(record)

    def producer_schema(self, generation: int) -> Any:
        return self._schema(self._record(generation))

    def consumer_schema(self) -> Any:
        """Consumers and readers read every version with the first record."""
        return self._schema(self._record(0))

    def encode(self, value: str, generation: int) -> Any:
        record = self._record(generation)
        return record(value=value, note=f"g{generation}") if generation else record(value=value)


def schema_version(message: Any) -> int:
    """A delivered message's schema version as the registry numbers it (Pulsar's 8-byte big-endian long)."""
    return int(message._message.int_schema_version())


def registry_versions(admin_url: str, topic: str, credentials: Credentials) -> list[int]:
    """Every version the registry holds for `topic`, from `GET /admin/v2/schemas/{t}/{ns}/{topic}/schemas`; a
    topic without a schema has none (404)."""
    from impl.broker.web.admin_client import AdminClient, topic_path
    from impl.security.tls import client_context
    from impl.web.http import HttpError

    tls = client_context(credentials.tls_trust_certs_file) if credentials.tls_trust_certs_file else None
    admin = AdminClient(admin_url, timeout_s=10.0, token=credentials.token, tls=tls)
    path = topic_path(topic).replace("/persistent/", "/schemas/", 1) + "/schemas"
    try:
        answer = admin.call("GET", path)
    except HttpError as e:
        if e.status == 404:
            return []
        raise
    return sorted(int(r["version"]) for r in answer.get("getSchemaResponses", []))


def record_registry(
    history: HistoryWriter, process: int, topics: list[str], admin_url: str, credentials: Credentials
) -> dict[str, list[int]]:
    """One `schemas` operation per topic (a partitioned topic by its base name: partitions share its schema),
    recorded as any other: `ok` with the `versions` the registry returned, `fail` when it did not answer."""
    found: dict[str, list[int]] = {}
    for topic in topics:
        history.invoke(process, "schemas", topic)
        try:
            versions = registry_versions(admin_url, topic, credentials)
        except Exception as e:  # a read of the registry changes nothing: fail
            history.complete(process, "fail", "schemas", topic, error=describe(e))
            continue
        history.complete(process, "ok", "schemas", topic, versions=versions)
        found[topic] = versions
    return found
