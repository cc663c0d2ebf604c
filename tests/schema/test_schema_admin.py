"""The schema admin API over HTTP, the namespace schema policies enforced on the official client's
producers, `pulsar-ref admin schemas`, and what a deleted schema leaves behind (nothing)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from impl.web.http import HttpError
from tests.broker.pulsar_standalone import ROOT, Standalone, running_standalone

pytestmark = pytest.mark.processes

AVRO_V0 = json.dumps({"type": "record", "name": "P", "fields": [{"name": "a", "type": "string"}]})
AVRO_V1 = json.dumps(
    {
        "type": "record",
        "name": "P",
        "fields": [{"name": "a", "type": "string"}, {"name": "b", "type": ["null", "int"], "default": None}],
    }
)
AVRO_BAD = json.dumps(
    {"type": "record", "name": "P", "fields": [{"name": "a", "type": "string"}, {"name": "b", "type": "int"}]}
)


class Point(Record):
    x = Integer()
    y = Integer()


def point_with_label() -> type[Record]:
    class Point(Record):
        x = Integer()
        y = Integer()
        label = String()  # no default: BACKWARD and FULL refuse it, FORWARD accepts it

    return Point


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    yield from running_standalone(tmp_path_factory)


@pytest.fixture
def client(standalone: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(standalone.url, operation_timeout_seconds=10)
    yield c
    c.close()


def new_namespace(s: Standalone) -> str:
    ns = f"public/schemas-{uuid.uuid4().hex[:8]}"
    s.admin.call("PUT", f"/admin/v2/namespaces/{ns}", {})
    return ns


def status_of(call: object) -> int:
    assert isinstance(call, HttpError), call
    return call.status


def http_error(s: Standalone, method: str, path: str, body: object = None) -> HttpError:
    with pytest.raises(HttpError) as e:
        s.admin.call(method, path, body)
    return e.value


def test_upload_get_versions_compatibility_delete(standalone: Standalone) -> None:
    s = standalone
    base = f"/admin/v2/schemas/public/default/rest-{uuid.uuid4().hex[:8]}"
    assert http_error(s, "GET", f"{base}/schema").status == 404
    assert s.admin.call("POST", f"{base}/schema", {"type": "AVRO", "schema": AVRO_V0}) == {"version": {"version": 0}}
    assert s.admin.call("POST", f"{base}/schema", {"type": "AVRO", "schema": AVRO_V0})["version"]["version"] == 0
    check = s.admin.call("POST", f"{base}/compatibility", {"type": "AVRO", "schema": AVRO_BAD})
    assert check["compatibility"] is False and check["schemaCompatibilityStrategy"] == "FULL"
    assert "reader_field_missing_default_value" in check["reason"]
    e = http_error(s, "POST", f"{base}/schema", {"type": "AVRO", "schema": AVRO_BAD})
    assert e.status == 409 and "FULL" in e.reason
    assert s.admin.call("POST", f"{base}/compatibility", {"type": "AVRO", "schema": AVRO_V1})["compatibility"]
    assert s.admin.call("POST", f"{base}/schema", {"type": "AVRO", "schema": AVRO_V1})["version"]["version"] == 1
    latest = s.admin.call("GET", f"{base}/schema")
    assert latest["version"] == 1 and latest["type"] == "AVRO" and json.loads(latest["data"]) == json.loads(AVRO_V1)
    assert json.loads(s.admin.call("GET", f"{base}/schema/0")["data"]) == json.loads(AVRO_V0)
    assert http_error(s, "GET", f"{base}/schema/7").status == 404
    assert http_error(s, "GET", f"{base}/schema/x").status == 400
    versions = s.admin.call("GET", f"{base}/schemas")["getSchemaResponses"]
    assert [v["version"] for v in versions] == [0, 1]
    assert s.admin.call("POST", f"{base}/version", {"type": "AVRO", "schema": AVRO_V0}) == {"version": 0}
    assert s.admin.call("DELETE", f"{base}/schema") == {"version": 1}
    assert http_error(s, "GET", f"{base}/schema").status == 404
    assert http_error(s, "DELETE", f"{base}/schema").status == 404


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"type": "AVRO", "schema": "{not json"}, 422),
        ({"type": "JSON", "schema": '{"type": "record", "name": "R"}'}, 422),
        ({"type": "SOMETHING", "schema": ""}, 422),
        ({"type": "AVRO", "schema": " " * (1024 * 1024 + 1)}, 413),  # over the web service's body limit
        ({"schema": AVRO_V0}, 400),
        ({"type": "AVRO", "schema": 5}, 400),
        ("AVRO", 400),
    ],
)
def test_bad_uploads_are_refused_and_nothing_is_registered(standalone: Standalone, body: object, status: int) -> None:
    base = f"/admin/v2/schemas/public/default/bad-{uuid.uuid4().hex[:8]}"
    e = http_error(standalone, "POST", f"{base}/schema", body)
    assert e.status == status and e.reason
    assert http_error(standalone, "GET", f"{base}/schema").status == 404


def test_strategies_from_namespace_policy(standalone: Standalone, client: pulsar.Client) -> None:
    s = standalone
    ns = new_namespace(s)
    policy = f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy"
    assert s.admin.call("GET", policy) == "UNDEFINED"
    assert status_of(http_error(s, "PUT", policy, "SOMETIMES")) == 400
    labelled = point_with_label()
    for strategy, accepted in [("FULL", False), ("BACKWARD", False), ("FORWARD", True), ("ALWAYS_COMPATIBLE", True)]:
        s.admin.call("PUT", policy, strategy)
        assert s.admin.call("GET", policy) == strategy
        t = f"persistent://{ns}/{strategy.lower()}"
        client.create_producer(t, schema=AvroSchema(Point))
        if accepted:
            client.create_producer(t, schema=AvroSchema(labelled))
        else:
            with pytest.raises(pulsar.IncompatibleSchema):
                client.create_producer(t, schema=AvroSchema(labelled))
    s.admin.call("PUT", policy, "ALWAYS_INCOMPATIBLE")
    t = f"persistent://{ns}/never"
    client.create_producer(t, schema=AvroSchema(Point))
    client.create_producer(t, schema=AvroSchema(Point))  # the same schema is its existing version
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(t, schema=AvroSchema(labelled))


def test_auto_update_off_and_validation_enforced(standalone: Standalone, client: pulsar.Client) -> None:
    s = standalone
    ns = new_namespace(s)
    s.admin.call("POST", f"/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema", False)
    s.admin.call("POST", f"/admin/v2/namespaces/{ns}/schemaValidationEnforced", True)
    assert s.admin.call("GET", f"/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema") is False
    assert s.admin.call("GET", f"/admin/v2/namespaces/{ns}/schemaValidationEnforced") is True
    t = f"persistent://{ns}/locked"
    client.create_producer(t)  # no schema on a topic without one: accepted
    client.create_producer(t, schema=AvroSchema(Point))  # the first version
    s.admin.call("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(t, schema=AvroSchema(point_with_label()))  # compatible, but updates are off
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(t)  # no schema on a topic that has one, enforced


def test_reader_fetches_schema_by_version(standalone: Standalone, client: pulsar.Client) -> None:
    ns = new_namespace(standalone)
    standalone.admin.call("PUT", f"/admin/v2/namespaces/{ns}/schemaCompatibilityStrategy", "FORWARD")
    t = f"persistent://{ns}/by-version"
    client.create_producer(t, schema=AvroSchema(Point))
    client.create_producer(t, schema=AvroSchema(point_with_label()))
    v0 = client._client.get_schema_info(t, 0)
    v1 = client._client.get_schema_info(t, 1)
    assert "label" not in v0.schema() and "label" in v1.schema()
    assert json.loads(v1.schema())["name"] == "Point"
    with pytest.raises(Exception, match="TopicNotFound|no schema version"):
        client._client.get_schema_info(t, 9)


def test_admin_cli_schemas(standalone: Standalone, tmp_path: Path) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"

    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pulsar_ref.cli", "admin", "--admin-url", standalone.web_url, *args]
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)

    good, bad = tmp_path / "v0.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"type": "AVRO", "schema": AVRO_V0}))
    bad.write_text(json.dumps({"type": "AVRO", "schema": AVRO_BAD}))
    up = admin("schemas", "upload", topic, "--filename", str(good))
    assert up.returncode == 0, up.stderr
    got = admin("schemas", "get", topic)
    assert got.returncode == 0 and json.loads(got.stdout)["version"] == 0
    compat = admin("schemas", "compatibility", topic, "--filename", str(bad))
    assert compat.returncode == 0 and json.loads(compat.stdout)["compatibility"] is False
    refused = admin("schemas", "upload", topic, "--filename", str(bad))
    assert refused.returncode == 2 and "(409)" in refused.stderr
    assert admin("schemas", "get", topic, "--version", "0").returncode == 0
    assert admin("schemas", "delete", topic).returncode == 0
    missing = admin("schemas", "get", topic)
    assert missing.returncode == 2 and "(404)" in missing.stderr
