"""One call from a metadata store (a URL, or a session of your own) to a BookKeeper client over real bookies.

    client = connect_bookkeeper("zk://127.0.0.1:2181/ledgers")   # or embedded:///dir, memory://
    try:
        handle = client.create_ledger(3, 3, 2, password=b"pw")
        ...
    finally:
        client.close()             # closes the bookie channels and the metadata session it opened

Given a URL, the client opens its own metadata session and closes it on `close()`. Given a
MetadataStore, the caller owns it (a broker shares its session with the client), so closing
the client leaves it open. docs/bookkeeper-client.md shows the whole API.

Completions (an add's Future and its done-callbacks) run on the transport's bookie I/O
thread, which serves every bookie stream (or, for in-process bookies given as `local_bookies`,
on its answering thread, under the same rules): a callback must not block on another client
call (e.g. `handle.add()` or another future's `.result()`); the blocking API calls refuse
with RuntimeError there instead of stalling every bookie connection. Hand blocking
follow-up work to a thread of your own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from impl.bookie.client.api import DEFAULT_TIMEOUT_S, BookKeeperClient
from impl.bookie.client.local_channel import LocalBookiesRegistry
from impl.bookie.client.pipelined_transport import DEFAULT_REQUEST_TIMEOUT_S, PipelinedTransport
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.registry import BookieRegistry
from impl.metadata.store import MetadataStore

if TYPE_CHECKING:
    from impl.trace import Tracer

__all__ = ["connect_bookkeeper"]


def connect_bookkeeper(
    store: MetadataStore | str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    seed: int | None = None,
    recovery_read_ahead: int = 1,
    tracer: Tracer | None = None,
    largest_entry: int | None = None,
    local_bookies: LocalBookiesRegistry | None = None,
) -> BookKeeperClient:
    """A BookKeeperClient whose bookies are reached at their registry ids (host:port), over framed connections.

    `store`: a metadata store URL (the client opens a session and closes it with itself) or an open
    MetadataStore (the caller's: the client never closes it).

    `timeout_s` bounds each blocking API call (add, close, open, read); `request_timeout_s`
    is the per-request deadline after which a silent bookie counts as failed (the writer
    then replaces it, recovery treats it as unknown). `seed` fixes bookie placement choices.
    `recovery_read_ahead`: entries read at once while recovering, each from one bookie at a time
    (BookKeeper's recoveryReadBatchSize, default 1). `tracer`: the recorder (impl/trace.py, e.g. a
    `TraceFile`) every writer and recovery op of the client reports its protocol steps to; None traces
    nothing. `largest_entry`: the largest entry body the client may add; new ensembles and replacements
    leave out bookies whose published frame limit (nettyMaxFrameSizeBytes) is below it. `local_bookies`: the
    bookies of this process, reached without a socket (impl/bookie/client/local_channel.py).
    """
    if not request_timeout_s < timeout_s:
        raise ValueError(
            f"request_timeout_s ({request_timeout_s}) must be below timeout_s ({timeout_s}): "
            "an API call must outlive at least one bookie deadline"
        )
    owned = None
    if isinstance(store, str):
        from impl.metadata.url import connect

        store = owned = connect(store)
    try:
        transport = PipelinedTransport(timeout_s=request_timeout_s, local_bookies=local_bookies)
    except BaseException:
        if owned is not None:
            owned.close()
        raise
    return BookKeeperClient(
        LedgerMetadataStore(store),
        BookieRegistry(store),
        transport,
        seed=seed,
        timeout_s=timeout_s,
        recovery_read_ahead=recovery_read_ahead,
        owned_store=owned,
        tracer=tracer,
        largest_entry=largest_entry,
    )
