"""A simulated bookie, and a simulated network of them: the production `BookieCore` over a disk in memory.

`SimBookie` is what a bookie process (impl/bookie/server.py) is, with memory for files. It feeds a
request to its core and performs what the core returns: `StoreEntry` puts the body into its ledger
storage, `AppendJournal` appends the records to its journal, `ReadEntry` is answered from ledger
storage, `Reply` is an answer. Its journal is durable at once (the append, its fsync and the replies
waiting for it are one step, as in ledger.tla), or, made with `hold=True`, only when `sync()` says so:
until then the appends wait in `unsynced` and the replies that need them wait in the core.

`crash()` loses what was not durable: the unsynced appends, ledger storage (never checkpointed here)
and the core's memory. The core is rebuilt at once from the journal with `Replay` events (a core
of the same class, given the same tracer), which puts the journalled entries back into ledger storage;
the bookie stays down until `restart()`. `fail()` takes a bookie out for good.

`SimNetwork` holds several bookies by id and is the BookKeeper client's transport to them
(impl/bookie/client/api.py's `BookieTransport`): a request is answered inline; a silent, down or
unknown bookie answers None, which the client takes as its timeout. A reply held for durability is
delivered when `sync(bookie)` releases it, and a bookie that crashes answers None to the requests it
was holding. Requests are serialised, as a real bookie's core serialises them.

Used by conformance/ledger_cluster.py (ledger.tla's bookies), and by the tests that need bookies
without processes (tests/broker/conftest.py, tests/bookie/, tests/client/simulation.py). A test
reaches a bookie's state through `core.ledgers` (master key, fenced, the entry ids it holds) and
`storage` (the bodies); `handle()` gives the core's `Reply`s (request id and response), `answer()`
and `SimNetwork` the bare `Response`, as a transport does. `SimNetwork.answer` may be called from
several threads (impl/bookie/client/transport.py's pool): it serialises them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from impl.bookie.core import (
    AppendJournal,
    BookieCore,
    JournalDurable,
    JournalRecord,
    Output,
    ReadEntry,
    Replay,
    Reply,
    RequestReceived,
    StoreEntry,
)
from impl.bookie.protocol import Request, Response


class BookieAnswerError(Exception):
    """The bookie did not answer a request with exactly one reply when one was expected."""


@dataclass
class SimBookie:
    core: BookieCore = field(default_factory=BookieCore)
    hold: bool = False  # journal appends become durable only at sync() (else at once)
    journal: list[JournalRecord] = field(default_factory=list)  # the durable records: what a crash keeps
    unsynced: list[AppendJournal] = field(default_factory=list)  # appended, not yet durable (hold)
    storage: dict[tuple[int, int], bytes] = field(default_factory=dict)  # ledger storage: (ledger, entry) -> body
    up: bool = True  # down from a crash until restart()
    failed: bool = False  # failed for good (its disk is gone)
    next_request_id: int = 0

    def handle(self, request: Request, request_id: int | None = None) -> list[Reply]:
        """Feed one request to the core; the replies it gives now (none while its durability is held)."""
        if request_id is None:
            request_id = self.next_request_id
            self.next_request_id += 1
        return self._perform(self.core.step(RequestReceived(request, request_id)))

    def answer(self, request: Request) -> Response:
        """The response to one request that is answered at once; BookieAnswerError if it is not exactly one."""
        request_id = self.next_request_id
        replies = self.handle(request)
        if len(replies) != 1 or replies[0].request_id != request_id:
            raise BookieAnswerError(f"answered {replies} to one request")
        return replies[0].response

    def sync(self, count: int | None = None) -> list[Reply]:
        """Make the first `count` unsynced journal appends durable (all of them by default), in order;
        the replies that were waiting for them."""
        syncing = self.unsynced[:count] if count is not None else self.unsynced
        self.unsynced = self.unsynced[len(syncing) :]
        replies: list[Reply] = []
        for append in syncing:
            self.journal.extend(append.records)
            replies += self._perform(self.core.step(JournalDurable(append.token)))
        return replies

    def body(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry's body in ledger storage; None if it holds none."""
        return self.storage.get((ledger_id, entry_id))

    def _perform(self, outputs: list[Output] | list[Reply | ReadEntry]) -> list[Reply]:
        replies: list[Reply] = []
        pending: list[Output] = list(outputs)
        while pending:
            out = pending.pop(0)
            if isinstance(out, StoreEntry):
                self.storage[out.ledger_id, out.entry_id] = out.body
            elif isinstance(out, AppendJournal):
                if self.hold:
                    self.unsynced.append(out)
                else:
                    self.journal.extend(out.records)
                    pending += self.core.step(JournalDurable(out.token))
            elif isinstance(out, ReadEntry):
                replies.append(out.reply(self.storage.get((out.ledger_id, out.entry_id))))
            else:
                replies.append(out)
        return replies

    # ---- faults ---------------------------------------------------------------------------------------
    def crash(self) -> None:
        """Stop, losing all but the journal; the restarted core replays it (the bookie stays down)."""
        self.up = False
        self.unsynced = []
        self.storage = {}
        self.core = type(self.core)(tracer=self.core.tracer)
        for record in self.journal:
            self._perform(self.core.step(Replay(record)))

    def restart(self) -> None:
        self.up = True

    def fail(self) -> None:
        """Out of service for good (its state is kept, for inspection)."""
        self.up = False
        self.failed = True


Answer = Callable[[Response | None], None]


class SimNetwork:
    """Bookies by id and the client's transport to them; `silent` bookies answer None (no answer)."""

    def __init__(self, bookies: Iterable[str], *, hold: bool = False) -> None:
        self.bookies: dict[str, SimBookie] = {b: SimBookie(hold=hold) for b in bookies}
        self.silent: set[str] = set()
        self.requests = 0  # requests that reached a bookie
        self._waiting: dict[tuple[str, int], Answer] = {}  # (bookie, request id) -> whom its held reply goes to
        self._lock = threading.Lock()

    def reachable(self, bookie: str) -> SimBookie | None:
        node = self.bookies.get(bookie)
        return node if node is not None and node.up and bookie not in self.silent else None

    def answer(self, bookie: str, request: Request) -> Response | None:
        """The bookie's response to one request answered at once; None if the bookie cannot be reached."""
        node = self.reachable(bookie)
        if node is None:
            return None
        with self._lock:
            self.requests += 1
            return node.answer(request)

    def send(self, bookie: str, request: Request, on_answer: Answer) -> None:
        """BookieTransport: `on_answer(response)` now, or when `sync(bookie)` releases it; None: no answer."""
        node = self.reachable(bookie)
        if node is None:
            on_answer(None)
            return
        with self._lock:
            self.requests += 1
            request_id = node.next_request_id
            replies = node.handle(request)
            if not replies:
                self._waiting[bookie, request_id] = on_answer
        for reply in replies:
            on_answer(reply.response)

    def sync(self, bookie: str, count: int | None = None) -> None:
        """The bookie's journal syncs (see SimBookie.sync); the replies it releases are delivered."""
        with self._lock:
            released = self.bookies[bookie].sync(count)
            answers = [(self._waiting.pop((bookie, r.request_id), None), r.response) for r in released]
        for on_answer, response in answers:
            if on_answer is not None:  # else a request `answer()` sent, whose caller expected no wait
                on_answer(response)

    def crash(self, bookie: str) -> None:
        """The bookie crashes (see SimBookie.crash); the requests it held are answered None."""
        with self._lock:
            self.bookies[bookie].crash()
            lost = [key for key in self._waiting if key[0] == bookie]
            answers = [self._waiting.pop(key) for key in lost]
        for on_answer in answers:
            on_answer(None)

    @property
    def storage(self) -> dict[tuple[str, int, int], bytes]:
        """Every bookie's ledger storage: (bookie, ledger, entry) -> body."""
        return {(b, *key): body for b, node in self.bookies.items() for key, body in node.storage.items()}


__all__ = ["BookieAnswerError", "SimBookie", "SimNetwork"]
