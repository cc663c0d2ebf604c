"""The schema registry the broker's listener and web service call (shell over SchemaStorage).

Decisions, as Pulsar's SchemaRegistryService makes them:
- a schema already among the topic's versions (same type and definition) is that version, whatever
  the strategy;
- a new schema is added only if the namespace allows automatic updates (isAllowAutoUpdateSchema,
  for producers; the admin API always may) and it is compatible under the namespace's strategy
  (schemaCompatibilityStrategy, the broker's FULL when unset);
- a consumer's schema is checked but never stored, unless the topic has no schema yet;
- a producer without a schema is refused on a topic that has one when the namespace enforces
  schemas (schemaValidationEnforced).
Lost races (LocatorConflict) are retried on the re-read locator.

A registry is one metadata session's (its storage's): the broker swaps in a new one when it renews
its session (BrokerService.adopt_session). A caller takes `service.schemas` once per operation, so
each registration reads and writes on one session, every attempt included; one that straddles a
renewal fails SessionExpired (retriable) instead of finishing on the new session.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from impl.bookie.client.api import BookKeeperClient
from impl.broker import namespaces
from impl.broker.schema import compatibility
from impl.broker.schema.model import IncompatibleSchema, SchemaData, SchemaNotFound, validate
from impl.broker.schema.storage import Locator, LocatorConflict, SchemaStorage
from impl.metadata.naming import TopicName
from impl.metadata.store import MetadataStore

ATTEMPTS = 8


@dataclass(frozen=True)
class SchemaPolicy:
    strategy: str = compatibility.DEFAULT_STRATEGY
    allow_auto_update: bool = True
    validation_enforced: bool = False


class SchemaRegistry:
    def __init__(self, storage: SchemaStorage, configuration_store: Callable[[], MetadataStore]) -> None:
        self.storage = storage
        self._configuration_store = configuration_store

    def on_session(self, store: MetadataStore, bookkeeper: BookKeeperClient) -> SchemaRegistry:
        """The same registry on the broker's new metadata session."""
        return SchemaRegistry(self.storage.on_session(store, bookkeeper), self._configuration_store)

    def policy(self, name: TopicName) -> SchemaPolicy:
        try:
            p = namespaces.get_policies(self._configuration_store(), name.namespace_name)
        except namespaces.AdminError:
            return SchemaPolicy()
        return SchemaPolicy(
            p.schema_compatibility_strategy or compatibility.DEFAULT_STRATEGY,
            p.is_allow_auto_update_schema,
            p.schema_validation_enforced,
        )

    # ---- reads -----------------------------------------------------------------------------------

    def versions(self, name: TopicName) -> list[tuple[int, SchemaData]]:
        loc = self.storage.locator(name)
        return [] if loc is None else self._versions(loc)

    def _versions(self, loc: Locator) -> list[tuple[int, SchemaData]]:
        return [(e.version, self.storage.read(e)) for e in loc.entries]

    def get(self, name: TopicName, version: int | None = None) -> tuple[int, SchemaData]:
        """(version, schema): the latest, or the one asked for; SchemaNotFound otherwise."""
        loc = self.storage.locator(name)
        if loc is None:
            raise SchemaNotFound(f"Topic {name} has no schema")
        if version is None:
            return loc.latest.version, self.storage.read(loc.latest)
        for e in loc.entries:
            if e.version == version:
                return version, self.storage.read(e)
        raise SchemaNotFound(f"Topic {name} has no schema version {version}")

    def find_version(self, name: TopicName, schema: SchemaData) -> int:
        for version, stored in self.versions(name):
            if stored.hash == schema.hash:
                return version
        raise SchemaNotFound(f"schema not found in the versions of {name}")

    def check_compatible(self, name: TopicName, schema: SchemaData) -> tuple[bool, str, str]:
        """(compatible, strategy, reason) without storing anything."""
        validate(schema)
        strategy = self.policy(name).strategy
        existing = self.versions(name)
        if any(s.hash == schema.hash for _, s in existing):
            return True, strategy, ""
        try:
            compatibility.check(schema, existing, strategy)
        except IncompatibleSchema as e:
            return False, strategy, str(e)
        return True, strategy, ""

    # ---- writes ----------------------------------------------------------------------------------

    def for_producer(self, name: TopicName, schema: SchemaData | None) -> int | None:
        """The version a producer's messages carry (None: no schema); IncompatibleSchema if refused."""
        policy = self.policy(name)
        if schema is None:
            if policy.validation_enforced and self.storage.locator(name) is not None:
                raise IncompatibleSchema(
                    "Producers cannot connect or send message without a schema to topics with a schema "
                    "if SchemaValidationEnforced is enabled"
                )
            return None
        return self.add(name, schema, policy, auto_update=policy.allow_auto_update)

    def for_consumer(self, name: TopicName, schema: SchemaData) -> None:
        if schema.type in ("AUTO_CONSUME", "NONE"):
            return  # asks for whatever the topic has
        policy = self.policy(name)
        validate(schema)
        loc = self.storage.locator(name)
        if loc is None:
            self.add(name, schema, policy, auto_update=True)
            return
        existing = self._versions(loc)
        if any(s.hash == schema.hash for _, s in existing):
            return
        compatibility.check(schema, existing, policy.strategy)

    def add(
        self, name: TopicName, schema: SchemaData, policy: SchemaPolicy | None = None, auto_update: bool = True
    ) -> int:
        """The schema's version: an existing one, or a new one if allowed and compatible."""
        validate(schema)
        policy = policy or self.policy(name)
        for _ in range(ATTEMPTS):
            loc = self.storage.locator(name)
            existing = [] if loc is None else self._versions(loc)
            for version, stored in existing:
                if stored.hash == schema.hash:
                    return version
            if existing and not auto_update:
                raise IncompatibleSchema("Schema not found and schema auto updating is disabled.")
            compatibility.check(schema, existing, policy.strategy)
            stamped = SchemaData(schema.type, schema.data, dict(schema.properties), int(time.time() * 1000))
            try:
                return self.storage.add(name, stamped, loc)
            except LocatorConflict:
                continue  # someone else registered meanwhile: decide again on what they wrote
        raise IncompatibleSchema(f"the schema of {name} kept changing during {ATTEMPTS} attempts; retry")

    def delete(self, name: TopicName) -> int | None:
        """Delete every version and its ledger; the last version, or None if there was no schema."""
        removed = self.storage.delete(name)
        return None if removed is None else removed.latest.version
