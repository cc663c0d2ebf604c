"""One topic's offload to tiered storage on its owner: the storage lifecycle core's shell.

The decisions are the pure core's (impl/broker/storage_lifecycle.py, checked against spec/storage.tla):
one offload at a time, record only an upload that completed, delete the bookie copy only once the record
is written, delete the object when the record surely did not apply. `TopicOffloader` performs its outputs
for one ledger at a time:

  Upload                  the offloader copies the ledger from the bookies under a fresh uid
  WriteList               the managed ledger writes its list with the ledger's offload context (Pulsar's
                          LedgerInfo.OffloadContext: uid, complete, bookkeeperDeleted, timestamp, driver),
                          by conditional write; its answer goes back as ListWritten, BadVersion or
                          WriteUnknown (a refusal, the ledger trimmed or the topic closed meanwhile, did not
                          apply: BadVersion)
  ScheduleBookieDeletion  the deletion lag is kept by the record itself: its timestamp plus
                          managedLedgerOffloadDeletionLagMs. The core is answered DeletionLagPassed at once
                          and its DeleteBookieCopy is performed by `sweep` when the lag has passed (a timer,
                          and the topic ticker), as Pulsar's trimmer deletes offloaded ledgers'
                          bookie copies: a restart or a new owner does not forget a deletion, and the next
                          ledger's offload does not wait the lag (4 h by default).
  DeleteObject            the offloader deletes the attempt's object (a failed upload or record)

`sweep` deletes the bookie copy of every recorded offload whose lag has passed, then marks it
`bookkeeperDeleted` (one more conditional write of the list).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from impl.bookie.client.errors import LedgerClientError
from impl.broker import storage_lifecycle as sl
from impl.broker.errors import BrokerError
from impl.broker.ledger_host import CallLater, Cancellable
from impl.broker.ledger_list import LedgerInfo, OffloadContext, Position
from impl.broker.managed_ledger_errors import ManagedLedgerError
from impl.broker.offload.api import LedgerOffloader
from impl.broker.offload.errors import OffloadError
from impl.metadata.store import MetadataError

if TYPE_CHECKING:
    from impl.broker.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)

MANAGED_LEDGER_NAME = "ManagedLedgerName"  # the extra metadata Pulsar hands its offloaders


class OffloadStatus(enum.Enum):
    """Pulsar's LongRunningProcessStatus (OffloadProcessStatus adds firstUnoffloadedMessage)."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class OffloadRunning(BrokerError):
    """An offload of the topic is already running (the admin API answers 409, as Pulsar)."""


class OffloadNotConfigured(BrokerError):
    """The broker has no offloader (the admin API answers 412)."""


def threshold_candidates(ledgers: list[LedgerInfo], current: int | None, threshold: int) -> list[int]:
    """The ledgers an `offloadThresholdInBytes` policy offloads (Pulsar's maybeOffload): from the newest,
    sum the ledgers' sizes; the closed ones not offloaded yet once the sum exceeds the threshold, oldest
    first. A negative threshold offloads nothing; 0 every closed ledger."""
    if threshold < 0:
        return []
    total, chosen = 0, []
    for info in reversed(ledgers):
        total += info.size
        if info.ledger_id != current and not info.offloaded and info.entries > 0 and total > threshold:
            chosen.append(info.ledger_id)
    return sorted(chosen)


def thread_timer(delay_s: float, action: Callable[[], None]) -> Cancellable:
    timer = threading.Timer(delay_s, action)
    timer.daemon = True
    timer.start()
    return timer


class TopicOffloader:
    """One topic's offload on its owner (see the module docstring)."""

    def __init__(
        self,
        name: str,
        ml: ManagedLedger,
        offloader: LedgerOffloader | None,
        deletion_lag_s: float,
        wall_clock: Callable[[], float] = time.time,
        call_later: CallLater = thread_timer,
    ) -> None:
        self.name = name
        self.ml = ml
        self.offloader = offloader
        self.deletion_lag_s = deletion_lag_s
        self.wall_clock = wall_clock
        self.call_later = call_later
        self.core = sl.StorageLifecycle(name, sl.LifecycleConfig(deletion_lag_s=deletion_lag_s))
        self.threshold = -1  # the namespace's offloadThresholdInBytes (-1: only on demand)
        self.status = OffloadStatus.NOT_RUN
        self.last_error = ""
        self.first_unoffloaded: Position | None = None
        self.closed = False
        self._lock = threading.Lock()
        self._sweeping = threading.Lock()
        self._timers: list[Cancellable] = []
        self._error = ""
        self._uploading: LedgerInfo | None = None

    # ---- requests -----------------------------------------------------------------------------

    def status_json(self) -> dict[str, object]:
        """Pulsar's OffloadProcessStatus."""
        with self._lock:
            first = self.first_unoffloaded
            return {
                "status": self.status.value,
                "lastError": self.last_error,
                "firstUnoffloadedMessage": {
                    "ledgerId": first.ledger_id if first else -1,
                    "entryId": first.entry_id if first else -1,
                    "partitionIndex": -1,
                },
            }

    def trigger(self, upto: Position) -> Position:
        """Offload, in the background, every closed ledger before the one holding `upto` (Pulsar's
        offloadPrefix); returns the first message that stays on the bookies. OffloadRunning if one runs."""
        self.ml.check_usable()
        if self.offloader is None:
            raise OffloadNotConfigured(f"no offloader is configured on this broker; {self.name} cannot be offloaded")
        ledgers, current, _ = self.ml.ledger_infos()
        chosen: list[int] = []
        retained = current if current is not None else -1
        for info in ledgers:
            if info.ledger_id == current:
                break
            if info.ledger_id >= upto.ledger_id:
                retained = info.ledger_id
                break
            if not info.offloaded and info.entries > 0:
                chosen.append(info.ledger_id)
        first = Position(retained, 0)
        self._start(chosen, first)
        return first

    def maybe_offload(self) -> bool:
        """The threshold check (after rollovers and on the topic ticker): start an offload of what exceeds
        the namespace's offloadThresholdInBytes. Returns whether one started."""
        if self.threshold < 0 or self.offloader is None or self.closed:
            return False
        ledgers, current, _ = self.ml.ledger_infos()
        chosen = threshold_candidates(ledgers, current, self.threshold)
        if not chosen:
            return False
        retained = next((i.ledger_id for i in ledgers if i.ledger_id > chosen[-1]), current or -1)
        try:
            self._start(chosen, Position(retained, 0))
        except OffloadRunning:
            return False
        return True

    def _start(self, ledger_ids: list[int], first: Position) -> None:
        with self._lock:
            if self.status is OffloadStatus.RUNNING:
                raise OffloadRunning(f"Offload already running on {self.name}")
            self.status, self.last_error, self.first_unoffloaded = OffloadStatus.RUNNING, "", first
        threading.Thread(target=self.run, args=(ledger_ids,), name=f"offload-{self.name}", daemon=True).start()

    def run(self, ledger_ids: list[int]) -> None:
        """Offload the ledgers in order, each to the end; stop at the first failure (the caller set RUNNING)."""
        error = ""
        done = []
        for ledger_id in ledger_ids:
            if self.closed:
                error = "the topic was closed on this broker"
                break
            try:
                error = self._offload(ledger_id)
            except Exception as e:
                log.exception("offload of %s ledger %d failed", self.name, ledger_id)
                error = f"{type(e).__name__}: {e}"
            if error:
                break
            done.append(ledger_id)
        with self._lock:
            self.status = OffloadStatus.ERROR if error else OffloadStatus.SUCCESS
            self.last_error = error
        if error:
            log.warning("offload of %s: %s (offloaded: %s)", self.name, error, done)
        elif done:
            log.info("offloaded ledgers %s of %s to %s", done, self.name, self.offloader and self.offloader.describe())

    def close(self) -> None:
        self.closed = True
        with self._lock:
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()

    # ---- one ledger: step the core, perform its outputs, feed back the answers -------------------

    def _offload(self, ledger_id: int) -> str:
        ledgers, current, version = self.ml.ledger_infos()
        info = next((i for i in ledgers if i.ledger_id == ledger_id), None)
        if info is None or info.offloaded:
            return ""  # trimmed or offloaded meanwhile: nothing to do
        # The core's view is the list as this broker has it now: its own changes of the list (rollovers,
        # trims, records) go one at a time through the managed ledger, each from the last version.
        listed = tuple(sl.ListedLedger(i, i.offload.uid if i.offloaded and i.offload else None) for i in ledgers)
        self.core.step(sl.Load(listed, version or 0, sl.CompactionCursor(0), current))
        self._error, self._uploading = "", info
        self._drive(sl.OffloadRequested(ledger_id, str(uuid.uuid4())))
        if self.core.op is not None and not self._error:
            self._error = f"the offload of ledger {ledger_id} stopped in stage {self.core.op.stage.value}"
        return self._error

    def _drive(self, event: sl.Event) -> None:
        sl.run(self.core, event, self._perform)

    def _perform(self, out: sl.Output) -> sl.Event | None:
        if isinstance(out, sl.Upload):
            return self._upload(out)
        if isinstance(out, sl.WriteList):
            return self._record(out)
        if isinstance(out, sl.ScheduleBookieDeletion):
            self._schedule_sweep(out.after_s)
            return sl.DeletionLagPassed(out.ledger_id)  # the lag is kept by the record's timestamp
        if isinstance(out, sl.DeleteBookieCopy):
            return None  # `sweep` deletes it once the record's lag has passed
        if isinstance(out, sl.DeleteObject):
            self._delete_object(out.ledger_id, out.uid)
            return None
        if isinstance(out, sl.Fenced):
            self._error = self._error or out.reason
            return None
        raise TypeError(f"offload does not perform {out!r}")

    def _upload(self, out: sl.Upload) -> sl.Event:
        info = self._uploading
        assert info is not None and info.ledger_id == out.ledger_id and self.offloader is not None
        try:
            self.offloader.offload(self.ml.source_ledger(info), out.uid, {MANAGED_LEDGER_NAME: self.ml.name})
        except (OffloadError, ManagedLedgerError, LedgerClientError, MetadataError, TimeoutError, OSError) as e:
            self._error = f"offloading ledger {out.ledger_id}: {e}; it stays on the bookies"
            return sl.UploadFailed(out.ledger_id, out.uid, str(e))
        return sl.Uploaded(out.ledger_id, out.uid)

    def _record(self, out: sl.WriteList) -> sl.Event:
        op = self.core.op
        assert op is not None and op.ledger_id is not None and self.offloader is not None
        context = OffloadContext(
            uid=op.uid,
            complete=True,
            bookkeeper_deleted=False,
            timestamp=self.wall_clock(),
            driver_name=self.offloader.driver_name,
            driver_metadata=self.offloader.driver_metadata(),
        )
        answer = self.ml.set_offload_context(op.ledger_id, context)
        if answer.outcome == "written" and answer.version is not None:
            return sl.ListWritten(answer.version)
        self._error = f"recording the offload of ledger {op.ledger_id} failed ({answer.outcome}: {answer.detail})"
        if answer.outcome == "unknown":
            return sl.WriteUnknown(answer.detail)
        return sl.BadVersion()  # badversion, or refused: the record surely did not apply

    def _delete_object(self, ledger_id: int, uid: str) -> None:
        if self.offloader is None:
            return
        try:
            self.offloader.delete_offloaded(ledger_id, uid)
        except OffloadError as e:  # a leak, never a loss: no list records this uid
            log.warning("%s: offloaded ledger %d (uid %s) left behind: %s", self.name, ledger_id, uid, e)

    # ---- the deletion lag ---------------------------------------------------------------------

    def _schedule_sweep(self, after_s: float) -> None:
        timer = self.call_later(after_s + 0.05, self._sweep_now)
        with self._lock:
            self._timers = [*self._timers[-15:], timer]

    def _sweep_now(self) -> None:
        self.sweep()

    def sweep(self) -> list[int]:
        """Delete the bookie copy of each recorded offload whose deletion lag has passed; returns them."""
        if self.closed or not self._sweeping.acquire(blocking=False):
            return []
        try:
            deleted = []
            ledgers, _, _ = self.ml.ledger_infos()
            now = self.wall_clock()
            for info in ledgers:
                context = info.offload
                if context is None or not context.complete or context.bookkeeper_deleted:
                    continue
                if now < context.timestamp + self.deletion_lag_s or self.closed:
                    continue
                self.ml.delete_bookie_copy(info.ledger_id)
                deleted.append(info.ledger_id)
                marked = dataclasses.replace(context, bookkeeper_deleted=True)
                answer = self.ml.set_offload_context(info.ledger_id, marked)
                if answer.outcome != "written":  # the next owner's sweep marks it (the delete is idempotent)
                    log.warning("%s: ledger %d: bookkeeperDeleted not recorded: %s", self.name, info.ledger_id, answer)
                    break
            if deleted:
                log.info("%s: deleted the bookie copies of offloaded ledgers %s", self.name, deleted)
            return deleted
        except (ManagedLedgerError, LedgerClientError, MetadataError, TimeoutError) as e:
            log.warning("%s: deleting offloaded ledgers' bookie copies: %s", self.name, e)
            return []
        finally:
            self._sweeping.release()
