"""The broker's offload settings, and the offloader that reads a ledger back.

A ledger's offload context (the ledger list) names the driver and its metadata (directory; bucket,
endpoint, region), so a broker reads an offloaded ledger from where it was written even after its own
settings changed: `Offloaders.for_context` builds that offloader once and keeps it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from impl.broker.offload.api import LedgerOffloader
from impl.broker.offload.errors import OffloadStoreError
from impl.broker.offload.filesystem import DRIVER as FILESYSTEM
from impl.broker.offload.filesystem import FileSystemOffloader

S3 = "aws-s3"
DRIVERS = (FILESYSTEM, S3, "S3")  # Pulsar's managedLedgerOffloadDriver values ("S3": an S3-compatible service)
DEFAULT_DELETION_LAG_S = 4 * 3600.0  # Pulsar's managedLedgerOffloadDeletionLagMs, 4 hours


@dataclass(frozen=True)
class OffloadSettings:
    """The broker's offloader (Pulsar's managedLedgerOffloadDriver and its options)."""

    driver: str = FILESYSTEM
    directory: str = ""  # filesystem: where offloaded ledgers go
    bucket: str = ""  # aws-s3: s3ManagedLedgerOffloadBucket
    endpoint: str = ""  # s3ManagedLedgerOffloadServiceEndpoint ("": AWS)
    region: str = ""  # s3ManagedLedgerOffloadRegion

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS:
            raise ValueError(f"unknown offload driver {self.driver!r}; use one of {', '.join(DRIVERS)}")
        if self.driver == FILESYSTEM and not self.directory:
            raise ValueError("the filesystem offloader needs a directory")
        if self.driver != FILESYSTEM and not self.bucket:
            raise ValueError("the S3 offloader needs a bucket")

    def metadata(self) -> dict[str, str]:
        if self.driver == FILESYSTEM:
            return {"directory": self.directory}
        return {"bucket": self.bucket, "endpoint": self.endpoint, "region": self.region}

    def create(self) -> LedgerOffloader:
        return create_offloader(self.driver, self.metadata())


def create_offloader(driver: str, metadata: Mapping[str, str]) -> LedgerOffloader:
    if driver == FILESYSTEM:
        return FileSystemOffloader(metadata.get("directory", ""))
    if driver in (S3, "S3"):
        from impl.broker.offload.s3 import S3Offloader  # boto3 loads only where S3 is used

        return S3Offloader(metadata.get("bucket", ""), metadata.get("endpoint", ""), metadata.get("region", ""))
    raise OffloadStoreError(f"ledger offloaded by driver {driver!r}, which this broker does not know")


class Offloaders:
    """The configured offloader (None: offload is off) and those that read what other settings wrote."""

    def __init__(self, settings: OffloadSettings | None) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._made: dict[tuple[str, tuple[tuple[str, str], ...]], LedgerOffloader] = {}
        self.configured: LedgerOffloader | None = None
        if settings is not None:
            self.configured = settings.create()
            self._made[self._key(self.configured.driver_name, self.configured.driver_metadata())] = self.configured

    @staticmethod
    def _key(driver: str, metadata: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
        return ("aws-s3" if driver == "S3" else driver, tuple(sorted(metadata.items())))

    def for_context(self, driver: str, metadata: Mapping[str, str]) -> LedgerOffloader:
        key = self._key(driver, metadata)
        with self._lock:
            found = self._made.get(key)
            if found is None:
                found = self._made[key] = create_offloader(driver, metadata)
            return found

    def close(self) -> None:
        with self._lock:
            made, self._made = list(self._made.values()), {}
        for offloader in made:
            offloader.close()
