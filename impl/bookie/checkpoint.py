"""The checkpoint mark: the journal position up to which ledger storage holds everything.

A checkpoint (driven by the bookie shell, periodically and on graceful shutdown) is:
1. note the journal's durable position P (every record before P was put into ledger
   storage before it was appended, so storage has it);
2. flush and fsync entry logs, then append and fsync the ledger index (ledger storage);
3. write the mark P here (a new file, fsynced, renamed over the old one);
4. delete the journal files wholly before P.
A crash before 3 leaves the previous mark: restart replays more journal than needed and
puts those entries into storage again (idempotent). The mark is one line with a CRC:
    journal <file no> <offset> crc <crc32 of "journal <file no> <offset>">
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from impl.bookie.entry_log import fsync_directory
from impl.bookie.journal import JournalPosition

FILE_NAME = "checkpoint"


class CorruptCheckpoint(Exception):
    """The checkpoint mark cannot be read: the bookie does not know where journal replay starts."""


def _line(position: JournalPosition) -> str:
    return f"journal {position.file_no} {position.offset}"


def read_mark(directory: Path) -> JournalPosition | None:
    """The last checkpoint's journal position, None if there was no checkpoint yet."""
    path = directory / FILE_NAME
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise _damaged(path, str(exc)) from exc
    try:
        head, crc = text.rsplit(" crc ", 1)
        word, file_no, offset = head.split(" ")
        position = JournalPosition(int(file_no), int(offset))
    except ValueError as exc:
        raise _damaged(path, f"cannot parse {text[:80]!r}") from exc
    if word != "journal" or int(crc) != zlib.crc32(head.encode()) or position.offset < 0:
        raise _damaged(path, f"checksum or fields do not match in {text[:80]!r}")
    return position


def write_mark(directory: Path, position: JournalPosition) -> None:
    line = _line(position)
    tmp = directory / f"{FILE_NAME}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{line} crc {zlib.crc32(line.encode())}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, directory / FILE_NAME)
    fsync_directory(directory)


def _damaged(path: Path, reason: str) -> CorruptCheckpoint:
    return CorruptCheckpoint(
        f"checkpoint mark {path} is damaged ({reason}). It names the journal position replay starts "
        "from, and older journal files were deleted: restore the file, or write it again with the "
        "oldest journal file still present (`journal <its number> 0 crc <crc32>`) to replay all that remains"
    )
