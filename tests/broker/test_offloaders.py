"""The offloaders (impl/broker/offload/): a ledger written, read back by ranges and deleted, on a directory and
on a real S3-compatible server process (moto's); bad stores and damaged objects refused with typed errors."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from impl.broker.offload.api import LedgerOffloader
from impl.broker.offload.errors import OffloadedLedgerCorrupt, OffloadedLedgerNotFound, OffloadStoreError
from impl.broker.offload.filesystem import FileSystemOffloader
from impl.broker.offload.format import object_key
from impl.broker.offload.registry import Offloaders, OffloadSettings
from impl.broker.offload.s3 import S3Offloader
from tests.s3_server import S3Server, s3_server  # noqa: F401  (the fixture)


class Ledger:
    """A closed ledger's entries, as the offloader reads them (the broker reads them from the bookies)."""

    def __init__(self, ledger_id: int, payloads: list[bytes]) -> None:
        self.ledger_id = ledger_id
        self.payloads = payloads
        self.last_entry_id = len(payloads) - 1

    def read(self, first: int, last: int) -> Sequence[tuple[int, bytes]]:
        return [(i, self.payloads[i]) for i in range(first, last + 1)]


PAYLOADS = [f"entry-{i}".encode() * (i % 7) for i in range(600)]  # empty ones too; more than one read batch


def round_trip(offloader: LedgerOffloader) -> None:
    offloader.offload(Ledger(12, PAYLOADS), "uid-1", {"ManagedLedgerName": "t/ns/persistent/x"})
    handle = offloader.read_offloaded(12, "uid-1")
    assert (handle.ledger_id, handle.last_entry_id, handle.length) == (12, 599, sum(map(len, PAYLOADS)))
    assert [p for _, p in handle.read(0, 599)] == PAYLOADS
    assert handle.read(300, 302) == [(300, PAYLOADS[300]), (301, PAYLOADS[301]), (302, PAYLOADS[302])]
    with pytest.raises(OffloadedLedgerNotFound):
        offloader.read_offloaded(12, "uid-2")  # another attempt's uid: never written
    offloader.delete_offloaded(12, "uid-1")
    offloader.delete_offloaded(12, "uid-1")  # gone already: done
    with pytest.raises(OffloadedLedgerNotFound):
        offloader.read_offloaded(12, "uid-1")


def test_filesystem_round_trip(tmp_path: Path) -> None:
    offloader = FileSystemOffloader(tmp_path)
    round_trip(offloader)
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_filesystem_bad_directories(tmp_path: Path) -> None:
    missing = FileSystemOffloader(tmp_path / "nope")
    with pytest.raises(OffloadStoreError, match="nope does not exist"):
        missing.offload(Ledger(1, [b"x"]), "u", {})
    read_only = tmp_path / "ro"
    read_only.mkdir(mode=0o555)
    with pytest.raises(OffloadStoreError, match="ro is read-only"):
        FileSystemOffloader(read_only).offload(Ledger(1, [b"x"]), "u", {})
    assert list(read_only.iterdir()) == []
    a_file = tmp_path / "file"
    a_file.write_bytes(b"")
    with pytest.raises(OffloadStoreError, match="is not a directory"):
        FileSystemOffloader(a_file).offload(Ledger(1, [b"x"]), "u", {})


def test_damaged_objects_are_refused(tmp_path: Path) -> None:
    offloader = FileSystemOffloader(tmp_path)
    offloader.offload(Ledger(3, [b"alpha", b"beta", b"gamma"]), "u", {})
    path = tmp_path / object_key(3, "u")
    data = bytearray(path.read_bytes())
    data[6] ^= 0xFF  # inside "beta"
    path.write_bytes(bytes(data))
    handle = offloader.read_offloaded(3, "u")
    assert handle.read(0, 0) == [(0, b"alpha")]
    with pytest.raises(OffloadedLedgerCorrupt, match="entry 1 fails its checksum"):
        handle.read(0, 2)
    path.write_bytes(bytes(data[:-3]))  # truncated: no trailer
    with pytest.raises(OffloadedLedgerCorrupt):
        offloader.read_offloaded(3, "u")


def test_a_failing_source_leaves_no_object(tmp_path: Path) -> None:
    class Failing(Ledger):
        def read(self, first: int, last: int) -> Sequence[tuple[int, bytes]]:
            raise OSError("bookies gone")

    with pytest.raises(OSError, match="bookies gone"):
        FileSystemOffloader(tmp_path).offload(Failing(4, [b"x"] * 3), "u", {})
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def bucket(s3_server: S3Server) -> Iterator[str]:  # noqa: F811
    name = f"offload-{os.urandom(4).hex()}"
    s3_server.client().create_bucket(Bucket=name)
    yield name


def test_s3_round_trip(s3_server: S3Server, bucket: str) -> None:  # noqa: F811
    offloader = S3Offloader(bucket, s3_server.endpoint)
    round_trip(offloader)
    assert s3_server.client().list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_s3_missing_bucket(s3_server: S3Server) -> None:  # noqa: F811
    offloader = S3Offloader("no-such-bucket-here", s3_server.endpoint)
    with pytest.raises(OffloadStoreError, match=f"bucket no-such-bucket-here at {s3_server.endpoint} does not exist"):
        offloader.offload(Ledger(1, [b"x"]), "u", {})


def test_s3_unreachable_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    offloader = S3Offloader("some-bucket", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(OffloadStoreError, match="cannot be reached"):
        offloader.offload(Ledger(1, [b"x"]), "u", {})


def test_registry_reads_with_the_recorded_driver(tmp_path: Path, s3_server: S3Server, bucket: str) -> None:  # noqa: F811
    offloaders = Offloaders(OffloadSettings("filesystem", directory=str(tmp_path)))
    assert offloaders.configured is not None
    assert offloaders.for_context("filesystem", {"directory": str(tmp_path)}) is offloaders.configured
    other = offloaders.for_context("aws-s3", {"bucket": bucket, "endpoint": s3_server.endpoint, "region": ""})
    assert isinstance(other, S3Offloader) and other.bucket == bucket
    with pytest.raises(OffloadStoreError, match="does not know"):
        offloaders.for_context("tape", {})
    with pytest.raises(ValueError, match="unknown offload driver"):
        OffloadSettings("tape")
    offloaders.close()
