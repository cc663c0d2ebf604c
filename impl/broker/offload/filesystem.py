"""The filesystem offloader (Pulsar's FileSystemManagedLedgerOffloader; the standalone's default): one
file per offloaded ledger in a directory.

An object is written to a temporary name, synced, then renamed into place (and the directory synced):
a file with the object's name is complete, whatever crash interrupted the broker. The directory is not
created here: a missing one is an operator's mistake to report (OffloadStoreError), not to paper over.
A directory whose mode has no write bit is read-only even for root (the kernel would let root write):
the operator's mark is honoured.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

from impl.broker.offload.api import BlobOffloader
from impl.broker.offload.errors import OffloadedLedgerNotFound, OffloadError, OffloadStoreError

DRIVER = "filesystem"


class FileSystemOffloader(BlobOffloader):
    driver_name = DRIVER

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory).absolute()

    def driver_metadata(self) -> dict[str, str]:
        return {"directory": str(self.directory)}

    def _usable_directory(self) -> Path:
        d = self.directory
        try:
            st = d.stat()
        except FileNotFoundError:
            raise OffloadStoreError(f"offload directory {d} does not exist; create it or configure another") from None
        except OSError as e:
            raise OffloadStoreError(f"offload directory {d} cannot be used: {e.strerror}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise OffloadStoreError(f"offload directory {d} is not a directory")
        if not st.st_mode & 0o222:
            raise OffloadStoreError(f"offload directory {d} is read-only (mode {stat.S_IMODE(st.st_mode):o})")
        return d

    def _path(self, key: str) -> Path:
        return self.directory / key

    def _put(self, key: str, chunks: Iterator[bytes]) -> None:
        d = self._usable_directory()
        tmp = d / f".{key}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with open(tmp, "xb") as f:
                for chunk in _source(chunks):  # the source's own errors (the bookies) pass through as they are
                    f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, d / key)
            fd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if isinstance(e, OSError) and not isinstance(e, _SourceError):
                raise _store_error(d, e) from None
            if isinstance(e, _SourceError):
                raise e.__cause__ from None  # type: ignore[misc]
            raise

    def _size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            raise OffloadedLedgerNotFound(f"offloaded object {self._path(key)} does not exist") from None
        except OSError as e:
            raise OffloadError(f"offloaded object {self._path(key)}: {e.strerror}") from None

    def _get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                f.seek(start)
                return f.read(end - start)
        except FileNotFoundError:
            raise OffloadedLedgerNotFound(f"offloaded object {self._path(key)} does not exist") from None
        except OSError as e:
            raise OffloadError(f"offloaded object {self._path(key)}: {e.strerror}") from None

    def _delete(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            return
        except OSError as e:
            raise _store_error(self.directory, e) from None


class _SourceError(Exception):
    """Carries an error of the ledger being read, so that it is not taken for the directory's."""


def _source(chunks: Iterator[bytes]) -> Iterator[bytes]:
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            return
        except Exception as e:
            raise _SourceError() from e
        yield chunk


def _store_error(directory: Path, e: OSError) -> OffloadStoreError:
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OffloadStoreError(f"offload directory {directory} is not writable: {e.strerror}")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return OffloadStoreError(f"offload directory {directory} is full: {e.strerror}")
    if e.errno == errno.ENOENT:
        return OffloadStoreError(f"offload directory {directory} does not exist (removed?): {e.strerror}")
    return OffloadStoreError(f"offload directory {directory}: {e.strerror or e}")
