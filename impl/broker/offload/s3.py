"""The S3 offloader (Pulsar's "aws-s3" / "S3" driver of jcloud's blob-store offloader) through boto3,
against AWS or any S3-compatible endpoint (`endpoint`: MinIO, Ceph, moto's server, ...).

One object per offloaded ledger in `bucket`: an upload (a PUT, or a multipart upload past boto3's
threshold) becomes visible whole or not at all. Credentials come from boto3's usual chain (the
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY environment, ~/.aws, an instance role). The bucket is not
created here: a missing bucket is reported (OffloadStoreError), as a missing directory is.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions as bex
from botocore.config import Config

from impl.broker.offload.api import BlobOffloader
from impl.broker.offload.errors import OffloadedLedgerNotFound, OffloadError, OffloadStoreError

DRIVER = "aws-s3"
SPOOL_BYTES = 16 * 1024 * 1024  # an object is spooled in memory up to this, then to a temporary file
_MISSING_BUCKET = {"NoSuchBucket"}
_MISSING_KEY = {"NoSuchKey", "404", "NotFound"}
_DENIED = {"AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"}


class S3Offloader(BlobOffloader):
    driver_name = DRIVER

    def __init__(self, bucket: str, endpoint: str = "", region: str = "") -> None:
        if not bucket:
            raise ValueError("the S3 offloader needs a bucket (s3ManagedLedgerOffloadBucket)")
        self.bucket = bucket
        self.endpoint = endpoint
        self.region = region or "us-east-1"
        config = Config(
            connect_timeout=5,
            read_timeout=30,
            retries={"max_attempts": 3, "mode": "standard"},
            s3={"addressing_style": "path"} if endpoint else {},
        )
        self._client: Any = boto3.session.Session().client(
            "s3", endpoint_url=endpoint or None, region_name=self.region, config=config
        )

    def driver_metadata(self) -> dict[str, str]:
        return {"bucket": self.bucket, "endpoint": self.endpoint, "region": self.region}

    def _where(self) -> str:
        return f"bucket {self.bucket}" + (f" at {self.endpoint}" if self.endpoint else "")

    def _error(self, e: Exception, key: str, writing: bool) -> OffloadError:
        if isinstance(e, bex.ClientError):
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in _MISSING_BUCKET:
                return OffloadStoreError(f"{self._where()} does not exist; create it or configure another")
            if code in _MISSING_KEY and not writing:
                return OffloadedLedgerNotFound(f"offloaded object {key} is not in {self._where()}")
            if code in _DENIED:
                what = "is not writable" if writing else "cannot be read"
                return OffloadStoreError(f"{self._where()} {what} with these credentials ({code})")
            return OffloadStoreError(f"{self._where()}: {code or e}")
        if isinstance(e, bex.NoCredentialsError):
            return OffloadStoreError(
                f"{self._where()}: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
            )
        if isinstance(e, bex.EndpointConnectionError | bex.ConnectTimeoutError | bex.ConnectionClosedError):
            return OffloadStoreError(f"{self._where()} cannot be reached: {e}")
        return OffloadStoreError(f"{self._where()}: {type(e).__name__}: {e}")

    def _put(self, key: str, chunks: Iterator[bytes]) -> None:
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            for chunk in chunks:  # read from the bookies first: a bookie failure uploads nothing
                spool.write(chunk)
            spool.seek(0)
            try:
                self._client.upload_fileobj(spool, self.bucket, key)
            except boto3.exceptions.S3UploadFailedError as e:
                cause = e.__cause__ or e.__context__
                if isinstance(cause, bex.BotoCoreError | bex.ClientError):
                    raise self._error(cause, key, True) from None
                raise _upload_error(self, e) from None
            except (bex.BotoCoreError, bex.ClientError) as e:
                raise self._error(e, key, True) from None

    def _size(self, key: str) -> int:
        try:
            return int(self._client.head_object(Bucket=self.bucket, Key=key)["ContentLength"])
        except (bex.BotoCoreError, bex.ClientError) as e:
            raise self._error(e, key, False) from None

    def _get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end - 1}")
            data: bytes = answer["Body"].read()
        except (bex.BotoCoreError, bex.ClientError) as e:
            raise self._error(e, key, False) from None
        if len(data) != end - start:
            raise OffloadError(f"offloaded object {key}: {len(data)} bytes read of {end - start} asked")
        return data

    def _delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except (bex.BotoCoreError, bex.ClientError) as e:
            raise self._error(e, key, True) from None

    def close(self) -> None:
        self._client.close()


def _upload_error(offloader: S3Offloader, e: Exception) -> OffloadError:
    """boto3's S3UploadFailedError carries the service's answer in its text only."""
    text = str(e)
    if "NoSuchBucket" in text:
        return OffloadStoreError(f"{offloader._where()} does not exist; create it or configure another")
    if "AccessDenied" in text:
        return OffloadStoreError(f"{offloader._where()} is not writable with these credentials")
    return OffloadStoreError(f"{offloader._where()}: {text}")
