"""Tiered storage (issue 45, item 2) against real `pulsar-ref standalone` processes with the official `pulsar`
client: closed ledgers offloaded on demand (`PUT .../offload`) and by the namespace's offloadThreshold, to a
directory and to a real S3-compatible server process (moto's); the bookie copies deleted after
managedLedgerOffloadDeletionLagMs; everything read back by a new subscription, a consumer's and a reader's
seeks, and after a restart. Bad stores (a missing or read-only directory, a missing bucket): the offload
fails with a clear error, the ledgers stay on the bookies, nothing is lost, and it succeeds once fixed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from impl.broker.web.admin_client import topic_path
from impl.web.http import HttpError
from pulsar_ref.commands import admin as admin_cli
from tests.broker.pulsar_standalone import Standalone
from tests.s3_server import S3Server, s3_server  # noqa: F401  (the fixture)
from tests.waiting import wait_for

pytestmark = pytest.mark.processes

PER_LEDGER = 10
COUNT = 35  # three closed ledgers of 10, the current one with 5
LATEST = {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}  # offload every closed ledger
LAG_MS = "1000"


def name(ns: str = "public/default") -> str:
    return f"persistent://{ns}/tiered-{uuid.uuid4().hex[:8]}"


def produce(client: pulsar.Client, topic: str, count: int = COUNT) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(count)]
    producer.close()
    return ids


def ledgers(standalone: Standalone, topic: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = standalone.admin.call("GET", topic_path(topic) + "/internalStats")["ledgers"]
    return found


def offload(standalone: Standalone, topic: str, upto: dict[str, int] = LATEST) -> dict[str, Any]:
    standalone.admin.call("PUT", topic_path(topic) + "/offload", body=upto)
    status: dict[str, Any] = {}

    def finished() -> bool:
        status.update(standalone.admin.call("GET", topic_path(topic) + "/offload"))
        return status["status"] != "RUNNING"

    wait_for(finished, "the offload to finish", timeout_s=20)
    return status


def bookie_copy_exists(standalone: Standalone, ledger_id: int) -> bool:
    try:
        standalone.admin.call("GET", f"/view/ledger/{ledger_id}", raw=True)
    except HttpError as e:
        if e.status == 404:
            return False
        raise
    return True


def wait_bookie_copies_deleted(standalone: Standalone, topic: str, offloaded: list[int]) -> None:
    def deleted() -> bool:
        marks = {
            x["ledgerId"]: x.get("offloadContext", {}).get("bookkeeperDeleted") for x in ledgers(standalone, topic)
        }
        return all(marks[i] for i in offloaded)

    wait_for(deleted, "the bookie copies to be deleted after the lag", timeout_s=10)
    assert not any(bookie_copy_exists(standalone, i) for i in offloaded)


def read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    try:
        while reader.has_message_available():
            got.append(reader.read_next(5_000).data())
    finally:
        reader.close()
    return got


EXPECTED = [f"m{i}".encode() for i in range(COUNT)]


def read_back(client: pulsar.Client, topic: str, ids: list[pulsar.MessageId]) -> None:
    """Everything, by a new subscription, a consumer's seek and a reader's seek into offloaded ledgers (no
    acknowledgement: acknowledged ledgers would be trimmed)."""
    consumer = client.subscribe(topic, f"sub-{uuid.uuid4().hex[:6]}", initial_position=pulsar.InitialPosition.Earliest)
    assert [consumer.receive(5_000).data() for _ in range(COUNT)] == EXPECTED
    consumer.close()  # (a consumer's seek would move its mark-delete: the ledgers before would be trimmed)
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    reader.seek(ids[6])  # back into the first ledger, offloaded (the official client's seek is exclusive)
    assert [reader.read_next(5_000).data() for _ in range(5)] == EXPECTED[7:12]  # across a ledger boundary
    reader.seek(ids[21])
    assert reader.read_next(5_000).data() == EXPECTED[22]
    reader.close()
    assert read_all(client, topic) == EXPECTED


def offload_and_read_back(standalone: Standalone, topic: str) -> tuple[list[pulsar.MessageId], list[int]]:
    client = pulsar.Client(standalone.url)
    try:
        ids = produce(client, topic)
        assert standalone.admin.call("GET", topic_path(topic) + "/offload")["status"] == "NOT_RUN"
        status = offload(standalone, topic)
        listed = ledgers(standalone, topic)
        assert status["status"] == "SUCCESS", status
        assert status["firstUnoffloadedMessage"]["ledgerId"] == listed[-1]["ledgerId"]
        assert [x["offloaded"] for x in listed] == [True, True, True, False]
        offloaded = [x["ledgerId"] for x in listed[:3]]
        wait_bookie_copies_deleted(standalone, topic, offloaded)
        read_back(client, topic, ids)
    finally:
        client.close()
    return ids, offloaded


def read_after_restart(
    data: Path, topic: str, ids: list[pulsar.MessageId], *options: str, objects: tuple[Path, list[int]] | None = None
) -> None:
    """Read everything back from a restarted standalone; with `objects` (the offload directory), then
    acknowledge everything: the trimmed ledgers' offloaded copies go too."""
    again = Standalone(data, *options)
    try:
        client = pulsar.Client(again.url)
        try:
            read_back(client, topic, ids)
            if objects is not None:
                for sub in again.admin.call("GET", topic_path(topic) + "/internalStats")["cursors"]:
                    client.subscribe(topic, sub).unsubscribe()  # the earlier runs' subscriptions hold data back
                consumer = client.subscribe(topic, "last", initial_position=pulsar.InitialPosition.Earliest)
                for _ in range(COUNT):
                    consumer.acknowledge(consumer.receive(5_000))
                directory, offloaded = objects

                def gone() -> bool:
                    names = [p.name for p in directory.iterdir()]
                    return not any(n.endswith(f"-ledger-{i}") for n in names for i in offloaded)

                wait_for(gone, "the trimmed ledgers' objects to go", timeout_s=15)
                assert len(ledgers(again, topic)) == 1  # only the current ledger is left
        finally:
            client.close()
    finally:
        again.stop()


def test_filesystem_offload_on_demand_and_by_threshold(tmp_path: Path) -> None:
    directory = tmp_path / "offloaded"
    directory.mkdir()
    options = ("--max-entries-per-ledger", str(PER_LEDGER), "--offload-dir", str(directory))
    options += ("--offload-deletion-lag-ms", LAG_MS)
    standalone = Standalone(tmp_path / "data", *options)
    try:
        topic = name()
        ids, offloaded = offload_and_read_back(standalone, topic)
        objects = sorted(p.name for p in directory.iterdir())
        assert len(objects) == 3 and all(any(o.endswith(f"-ledger-{i}") for o in objects) for i in offloaded)
        context = ledgers(standalone, topic)[0]["offloadContext"]
        assert context["driverName"] == "filesystem" and context["driverMetadata"] == {"directory": str(directory)}

        # offloadThreshold 0 in a namespace of its own: every closed ledger goes, after each rollover.
        standalone.admin.call("PUT", "/admin/v2/namespaces/public/auto", body={})
        assert standalone.admin.call("GET", "/admin/v2/namespaces/public/auto/offloadThreshold") == -1
        standalone.admin.call("PUT", "/admin/v2/namespaces/public/auto/offloadThreshold", body=0)
        assert standalone.admin.call("GET", "/admin/v2/namespaces/public/auto/offloadThreshold") == 0
        auto = name("public/auto")
        client = pulsar.Client(standalone.url)
        try:
            produce(client, auto)
            wait_for(
                lambda: [x["offloaded"] for x in ledgers(standalone, auto)] == [True, True, True, False],
                "the threshold's offload",
                timeout_s=15,
            )
            assert read_all(client, auto) == EXPECTED
        finally:
            client.close()
    finally:
        standalone.stop()
    read_after_restart(tmp_path / "data", topic, ids, *options, objects=(directory, offloaded))


def test_s3_offload_to_a_real_s3_server(tmp_path: Path, s3_server: S3Server) -> None:  # noqa: F811
    bucket = f"tiered-{uuid.uuid4().hex[:8]}"
    options = ("--max-entries-per-ledger", str(PER_LEDGER), "--offload-driver", "aws-s3")
    options += ("--s3-offload-bucket", bucket, "--s3-offload-endpoint", s3_server.endpoint)
    options += ("--offload-deletion-lag-ms", LAG_MS)
    standalone = Standalone(tmp_path, *options)
    try:
        topic = name()
        client = pulsar.Client(standalone.url)
        try:
            produce(client, topic, 15)
            failed = offload(standalone, topic)  # the bucket does not exist yet
            assert failed["status"] == "ERROR"
            assert f"bucket {bucket} at {s3_server.endpoint} does not exist" in failed["lastError"], failed
            assert not any(x["offloaded"] for x in ledgers(standalone, topic))
            assert read_all(client, topic) == EXPECTED[:15]
        finally:
            client.close()
        s3_server.client().create_bucket(Bucket=bucket)
        topic = name()
        ids, offloaded = offload_and_read_back(standalone, topic)
        keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket)["Contents"]]
        assert sorted(int(k.rsplit("-", 1)[1]) for k in keys) == sorted(offloaded)
    finally:
        standalone.stop()
    read_after_restart(tmp_path, topic, ids, *options)


@pytest.fixture
def missing_dir_standalone(tmp_path: Path) -> Iterator[tuple[Standalone, Path]]:
    directory = tmp_path / "not-yet"
    standalone = Standalone(
        tmp_path / "data",
        *("--max-entries-per-ledger", str(PER_LEDGER), "--offload-dir", str(directory)),
        *("--managed-ledger-cache-size-mb", "0"),  # every read goes to the bookies or the offloaded copy
    )
    try:
        yield standalone, directory
    finally:
        standalone.stop()
        if directory.exists():
            directory.chmod(0o755)


def test_bad_stores_and_requests(
    missing_dir_standalone: tuple[Standalone, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    standalone, directory = missing_dir_standalone
    topic = name()
    client = pulsar.Client(standalone.url)
    try:
        produce(client, topic)
        missing = offload(standalone, topic)
        assert missing["status"] == "ERROR" and f"offload directory {directory} does not exist" in missing["lastError"]
        directory.mkdir(mode=0o555)
        read_only = offload(standalone, topic)
        assert read_only["status"] == "ERROR" and "is read-only" in read_only["lastError"], read_only
        listed = ledgers(standalone, topic)
        assert not any(x["offloaded"] for x in listed)
        assert all(bookie_copy_exists(standalone, x["ledgerId"]) for x in listed)  # the bookie copies stay
        assert list(directory.iterdir()) == []
        assert read_all(client, topic) == EXPECTED  # nothing lost, the broker serves

        directory.chmod(0o755)  # fixed: the next offload goes through, here through `pulsar-ref admin`

        def cli(*argv: str) -> str:
            assert admin_cli.main(["--admin-url", standalone.web_url, *argv], "pulsar-ref admin") == 0
            return capsys.readouterr().out

        cli("topics", "offload", topic, "--message-id", f"{listed[1]['ledgerId']}:0")
        wait_for(lambda: '"SUCCESS"' in cli("topics", "offload-status", topic), "the offload", timeout_s=20)
        assert [x["offloaded"] for x in ledgers(standalone, topic)] == [True, False, False, False]
        view = standalone.admin.call("GET", "/view/topic/public/default/" + topic.rsplit("/", 1)[1], raw=True)
        assert "offloaded, " in view  # the live view marks it (its bookie copy stays for the 4 h lag)
        assert read_all(client, topic) == EXPECTED  # the first ledger from its offloaded copy
        [obj] = directory.iterdir()
        obj.unlink()  # deleted behind the broker's back: read from the bookie copy, still there
        assert read_all(client, topic) == EXPECTED
        cli("namespaces", "set-offload-threshold", "public/default", "--size", "1048576")
        assert cli("namespaces", "get-offload-threshold", "public/default").strip() == "1048576"
        assert read_all(client, topic) == EXPECTED
    finally:
        client.close()

    def status(method: str, path: str, body: Any = None) -> int:
        try:
            standalone.admin.call(method, path, body=body)
        except HttpError as e:
            return e.status
        return 200

    assert status("PUT", topic_path(topic) + "/offload", {"ledgerId": "x"}) == 400
    assert status("PUT", topic_path(topic) + "/offload", [1, 2]) == 400
    assert status("PUT", topic_path(name()) + "/offload", LATEST) == 404
    assert status("GET", topic_path(name()) + "/offload") == 404
    assert status("PUT", "/admin/v2/namespaces/public/default/offloadThreshold", -2) == 412
    assert status("PUT", "/admin/v2/namespaces/public/default/offloadThreshold", "big") == 400
    assert status("PUT", "/admin/v2/namespaces/public/nope/offloadThreshold", 10) == 404
