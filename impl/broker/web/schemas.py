"""Pulsar's schema admin API v2 (/admin/v2/schemas/...) and the namespace schema policies.

Any broker answers: the locator is in the cluster's metadata store and the versions in BookKeeper
(docs/schema.md). Statuses as Pulsar's: 404 no schema or version, 409 incompatible, 422 an invalid
definition, 400 a malformed body.
"""

from __future__ import annotations

import json
from typing import Any

from impl.broker import namespaces
from impl.broker.schema import compatibility
from impl.broker.schema.model import (
    TYPE_NUMBERS,
    IncompatibleSchema,
    InvalidSchema,
    SchemaData,
    SchemaError,
    SchemaNotFound,
)
from impl.broker.web.context import WebContext
from impl.metadata.naming import NamespaceName, TopicName, check_named_entity
from impl.web.http import HttpError, Request, Response, Router


def install(router: Router, ctx: WebContext) -> None:
    SchemaRoutes(ctx).install(router)


def _http(e: SchemaError) -> HttpError:
    if isinstance(e, SchemaNotFound):
        return HttpError(404, str(e))
    if isinstance(e, InvalidSchema):
        return HttpError(422, str(e))
    if isinstance(e, IncompatibleSchema):
        return HttpError(409, str(e))
    return HttpError(500, str(e))


def _response(version: int, schema: SchemaData) -> dict[str, Any]:
    """Pulsar's GetSchemaResponse."""
    return {
        "version": version,
        "type": "BYTES" if schema.type == "NONE" else schema.type,
        "timestamp": schema.timestamp,
        "data": schema.data.decode("utf-8", "replace"),
        "properties": schema.properties,
    }


def _payload(req: Request) -> SchemaData:
    """Pulsar's PostSchemaPayload: {"type": "AVRO", "schema": "<definition>", "properties": {...}}."""
    body = req.json()
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise HttpError(400, 'the body must be {"type": "AVRO", "schema": "<definition>", "properties": {}}')
    kind = body["type"].upper()
    if kind not in TYPE_NUMBERS or kind in ("AUTO_CONSUME", "KEY_VALUE"):
        raise HttpError(
            422, f"Invalid schema type {body['type']!r}" + (": upload its key and value" if kind == "KEY_VALUE" else "")
        )
    definition = body.get("schema", "")
    if not isinstance(definition, str):
        raise HttpError(400, f"schema must be a string (the definition), not {type(definition).__name__}")
    props = body.get("properties") or {}
    if not isinstance(props, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise HttpError(400, "properties must be an object of strings")
    return SchemaData("NONE" if kind == "BYTES" else kind, definition.encode(), dict(props))


class SchemaRoutes:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def install(self, r: Router) -> None:
        base = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
        r.add("GET", f"{base}/schema", self.get)
        r.add("POST", f"{base}/schema", self.post)
        r.add("DELETE", f"{base}/schema", self.delete)
        r.add("GET", f"{base}/schema/{{version}}", self.get_version)
        r.add("GET", f"{base}/schemas", self.all_versions)
        r.add("POST", f"{base}/compatibility", self.compatibility)
        r.add("POST", f"{base}/version", self.version)
        ns = "/admin/v2/namespaces/{tenant}/{namespace}"
        r.add("GET", f"{ns}/schemaCompatibilityStrategy", self.get_strategy)
        r.add("PUT", f"{ns}/schemaCompatibilityStrategy", self.set_strategy)
        r.add("GET", f"{ns}/isAllowAutoUpdateSchema", self.get_auto_update)
        r.add("POST", f"{ns}/isAllowAutoUpdateSchema", self.set_auto_update)
        r.add("GET", f"{ns}/schemaValidationEnforced", self.get_enforced)
        r.add("POST", f"{ns}/schemaValidationEnforced", self.set_enforced)

    def _name(self, tenant: str, namespace: str, topic: str) -> TopicName:
        name = TopicName.parse(f"persistent://{tenant}/{namespace}/{topic}")
        namespaces.get_policies(self.ctx.configuration_store, name.namespace_name)  # 404 for a missing namespace
        return name

    @property
    def _registry(self) -> Any:
        return self.ctx.service.schemas

    def get(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        try:
            return Response.json(_response(*self._registry.get(self._name(tenant, namespace, topic))))
        except SchemaError as e:
            raise _http(e) from None

    def get_version(self, req: Request, tenant: str, namespace: str, topic: str, version: str) -> Response:
        if not version.isdigit():
            raise HttpError(400, f"a schema version is a whole number >= 0, not {version!r}")
        try:
            return Response.json(_response(*self._registry.get(self._name(tenant, namespace, topic), int(version))))
        except SchemaError as e:
            raise _http(e) from None

    def all_versions(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        versions = self._registry.versions(name)
        if not versions:
            raise HttpError(404, f"Topic {name} has no schema")
        return Response.json({"getSchemaResponses": [_response(v, s) for v, s in versions]})

    def post(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        schema = _payload(req)
        try:
            version = self._registry.add(name, schema)  # the admin API may add even when auto-update is off
        except SchemaError as e:
            raise _http(e) from None
        return Response.json({"version": {"version": version}})

    def delete(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        version = self._registry.delete(name)
        if version is None:
            raise HttpError(404, f"Topic {name} has no schema")
        return Response.json({"version": version})

    def compatibility(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        schema = _payload(req)
        try:
            ok, strategy, reason = self._registry.check_compatible(name, schema)
        except SchemaError as e:
            raise _http(e) from None
        body: dict[str, Any] = {"compatibility": ok, "schemaCompatibilityStrategy": strategy}
        if reason:
            body["reason"] = reason
        return Response.json(body)

    def version(self, req: Request, tenant: str, namespace: str, topic: str) -> Response:
        name = self._name(tenant, namespace, topic)
        try:
            return Response.json({"version": self._registry.find_version(name, _payload(req))})
        except SchemaError as e:
            raise _http(e) from None

    # ---- namespace policies --------------------------------------------------------------------

    def _ns(self, tenant: str, namespace: str) -> NamespaceName:
        return NamespaceName(check_named_entity("tenant", tenant), check_named_entity("namespace", namespace))

    def _policies(self, tenant: str, namespace: str) -> namespaces.NamespacePolicies:
        return namespaces.get_policies(self.ctx.configuration_store, self._ns(tenant, namespace))

    def get_strategy(self, req: Request, tenant: str, namespace: str) -> Response:
        return Response.json(self._policies(tenant, namespace).schema_compatibility_strategy or "UNDEFINED")

    def set_strategy(self, req: Request, tenant: str, namespace: str) -> Response:
        raw = req.body.decode(errors="replace").strip()
        try:
            value = json.loads(raw) if raw.startswith('"') else raw
        except json.JSONDecodeError:
            value = raw
        if not isinstance(value, str):
            raise HttpError(400, "the body must be a strategy name")
        value = value.upper()
        if value != "UNDEFINED":
            try:
                compatibility.check_strategy(value)
            except ValueError as e:
                raise HttpError(400, str(e)) from None
        strategy = None if value == "UNDEFINED" else value
        namespaces.set_schema_policies(
            self.ctx.configuration_store, self._ns(tenant, namespace), schema_compatibility_strategy=strategy
        )
        return Response.empty()

    def _flag(self, req: Request) -> bool:
        value = req.json()
        if not isinstance(value, bool):
            raise HttpError(400, f"the body must be true or false, not {value!r}")
        return value

    def get_auto_update(self, req: Request, tenant: str, namespace: str) -> Response:
        return Response.json(self._policies(tenant, namespace).is_allow_auto_update_schema)

    def set_auto_update(self, req: Request, tenant: str, namespace: str) -> Response:
        namespaces.set_schema_policies(
            self.ctx.configuration_store, self._ns(tenant, namespace), is_allow_auto_update_schema=self._flag(req)
        )
        return Response.empty()

    def get_enforced(self, req: Request, tenant: str, namespace: str) -> Response:
        return Response.json(self._policies(tenant, namespace).schema_validation_enforced)

    def set_enforced(self, req: Request, tenant: str, namespace: str) -> Response:
        namespaces.set_schema_policies(
            self.ctx.configuration_store, self._ns(tenant, namespace), schema_validation_enforced=self._flag(req)
        )
        return Response.empty()
