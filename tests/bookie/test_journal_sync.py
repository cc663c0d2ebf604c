"""An acknowledged add survives a crash that loses everything not fsynced (issue 24 item 3; ledger.tla's
JournalSyncData switch, whose FALSE direction, ledger-switch-ackbeforesync-ci, violates AckedEntriesReadable).

A SIGKILL loses nothing a bookie wrote: the page cache outlives the process. A power loss also loses what
was written but not synced. So the bookie's fault point `--crash-at power-loss-before-entry:LEDGER:ENTRY`
makes the journal flush that would write that entry a power loss: the current journal file is cut back to
its last sync (what only the page cache held is gone), the entry's records are never written, and the
process SIGKILLs itself. Nothing else a restart reads can hold the lost entries: ledger storage's index is
written only by checkpoints, which fsync the entry logs first, and these bookies take none (an hour apart).

- pulsar-ref's journal (O_DSYNC: every write is its own fdatasync) answers an add only after the write
  that holds it, so every add acknowledged before the power loss is read back after the restart, and the
  add in flight was never acknowledged (its connection broke) and is gone.
- The same run with the journal of BookKeeper's `journalSyncData = false` (impl/bookie/journal.py's
  UnsyncedJournal, run by tests/bookie/unsynced_bookie.py: adds answered once written, before any fsync)
  loses every entry it acknowledged: the first test's assertions fail on it. That is what makes the first
  test able to fail, and what the switch models. (A bookie core that answered before `on_durable` is the
  conformance mutant `bookie-acks-before-durable`, killed by ledger-switch-ackbeforesync-ci.)
"""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from impl.bookie.channel import BookieChannel
from impl.bookie.core import JournalRecord, RecordKind
from impl.bookie.entry_format import encode_entry, master_key
from impl.bookie.journal import UnsyncedJournal
from impl.bookie.protocol import AddRequest, AddResponse, ErrorCode, ReadRequest, ReadResponse
from impl.bookie.server import POWER_LOSS_BEFORE_ENTRY
from tests.bookie.bookie_process import BookieProcess
from tests.processes import ROOT
from tests.waiting import wait_for

KEY = master_key(b"secret")
LEDGER = 1
ACKED = 5  # entries 0..4 are acknowledged; the power is lost as entry 5 is about to be written
# no checkpoint (it would put the entries into ledger storage's index) and no garbage collection
OPTIONS = ("--checkpoint-interval", "3600", "--gc-interval", "0")


def body(entry_id: int) -> bytes:
    return encode_entry(LEDGER, entry_id, entry_id - 1, entry_id + 1, b"entry %d" % entry_id)


def start_unsynced(data: Path, metadata: str, *options: str) -> tuple[subprocess.Popen[str], str]:
    """`pulsar-ref bookie` with journalSyncData = false; (process, address) once it listens."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.bookie.unsynced_bookie", "--metadata", metadata, "--data", str(data), *options],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening" not in line:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the unsynced bookie did not start: {line!r}")
    return proc, line.split()[1]


def adds_until_the_power_loss(proc: subprocess.Popen[str], address: str) -> list[int]:
    """Entries 0, 1, ... one at a time until the one the power loss takes; the ids acknowledged."""
    channel = BookieChannel(address)
    try:
        acked = []
        for entry_id in range(ACKED):
            reply = channel.call(AddRequest(LEDGER, entry_id, KEY, body(entry_id)))
            assert reply == AddResponse(LEDGER, entry_id, ErrorCode.EOK), reply
            acked.append(entry_id)
        with pytest.raises(ConnectionError):  # never acknowledged: the process died first
            channel.call(AddRequest(LEDGER, ACKED, KEY, body(ACKED)))
    finally:
        channel.close()
    assert proc.wait(30) == -signal.SIGKILL  # the fault point fired
    return acked


def read_back(data: Path, metadata: str) -> tuple[dict[int, ErrorCode], int]:
    """After a restart: each entry's read code (EOK only with the body it was added with), and the
    journal records the restart replayed."""
    bookie = BookieProcess(data, metadata, *OPTIONS)
    try:
        channel = BookieChannel(bookie.address)
        codes = {}
        for entry_id in range(ACKED + 1):
            reply = channel.call(ReadRequest(LEDGER, entry_id))
            assert isinstance(reply, ReadResponse), reply
            assert reply.code is not ErrorCode.EOK or reply.body == body(entry_id)
            codes[entry_id] = reply.code
        channel.close()
        return codes, bookie.replayed
    finally:
        bookie.kill()


@pytest.mark.processes
def test_acknowledged_adds_survive_a_power_loss(tmp_path: Path) -> None:
    metadata = f"embedded://{tmp_path / 'meta'}"
    fault = f"{POWER_LOSS_BEFORE_ENTRY}:{LEDGER}:{ACKED}"
    bookie = BookieProcess(tmp_path / "data", metadata, *OPTIONS, "--crash-at", fault)
    try:
        acked = adds_until_the_power_loss(bookie.proc, bookie.address)
    finally:
        bookie.ensure_stopped()
    codes, replayed = read_back(tmp_path / "data", metadata)
    assert all(codes[e] is ErrorCode.EOK for e in acked), codes
    assert codes[ACKED] is ErrorCode.ENOENTRY  # the unsynced tail was lost: the add in flight
    assert replayed == 1 + ACKED  # the ledger's master key and the acknowledged entries, from the journal


@pytest.mark.processes
def test_the_same_power_loss_takes_what_an_unsynced_journal_acknowledged(tmp_path: Path) -> None:
    metadata = f"embedded://{tmp_path / 'meta'}"
    fault = f"{POWER_LOSS_BEFORE_ENTRY}:{LEDGER}:{ACKED}"
    proc, address = start_unsynced(tmp_path / "data", metadata, *OPTIONS, "--crash-at", fault)
    try:
        acked = adds_until_the_power_loss(proc, address)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert acked == list(range(ACKED))
    codes, replayed = read_back(tmp_path / "data", metadata)
    # every acknowledged entry is gone: the journal was never synced, the ledger with it
    assert all(codes[e] is ErrorCode.ENOLEDGER for e in range(ACKED + 1)), codes
    assert replayed == 0


def test_an_unsynced_journal_syncs_only_for_a_fence(tmp_path: Path) -> None:
    """What a power loss would keep of UnsyncedJournal's file (`_synced`): nothing of its adds, acknowledged
    as soon as written; everything once a fence record is synced (ledger.tla's switch syncs fences too)."""
    journal = UnsyncedJournal(tmp_path)
    try:
        done: list[int] = []
        for entry_id in range(3):
            record = JournalRecord(RecordKind.ENTRY, LEDGER, entry_id, KEY, body(entry_id))
            journal.append([record], functools.partial(done.append, entry_id))
        wait_for(lambda: done == [0, 1, 2], "the adds' callbacks")
        assert journal._synced == 0 < journal.durable_position.offset
        journal.append([JournalRecord(RecordKind.FENCE, LEDGER, master_key=KEY)], lambda: done.append(-1))
        wait_for(lambda: done[-1:] == [-1], "the fence's callback")
        assert journal._synced == journal.durable_position.offset
    finally:
        journal.close()
