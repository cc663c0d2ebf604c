"""A garbage-collected ledger takes no more adds (BookKeeper issue 4462, spec/fencing.tla's
DeletedLedgerRefusesAdds): a writer that still holds a ledger someone else deleted (a broker whose session
expired unnoticed) must not have an add acknowledged there. Forgetting a ledger forgets its fence too, so
without a record of the deletion the bookie would re-create the ledger and acknowledge the add on a ledger
that no reader of the metadata will ever see."""

from __future__ import annotations

from pathlib import Path

from impl.bookie.channel import BookieChannel
from impl.bookie.core import AppendJournal, BookieCore, ForgetLedger, JournalDurable, Reply, RequestReceived
from impl.bookie.entry_format import encode_entry, master_key
from impl.bookie.ledger_storage import DELETED_LEDGERS, LedgerStorage
from impl.bookie.protocol import AddRequest, AddResponse, ErrorCode, ReadLacRequest
from impl.metadata.ledger import Fragment, LedgerMetadata
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.url import connect
from tests.bookie.bookie_process import BookieProcess
from tests.waiting import wait_for

KEY = master_key(b"secret")


def add(ledger: int, entry: int, recovery: bool = False) -> AddRequest:
    return AddRequest(ledger, entry, KEY, encode_entry(ledger, entry, entry - 1, entry + 1, b"x"), recovery)


def answer(core: BookieCore, request: AddRequest) -> ErrorCode:
    """The code of the add's reply, its journal write taken as durable at once."""
    out = core.step(RequestReceived(request, 0))
    replies = [o for o in out if isinstance(o, Reply)]
    for o in out:
        if isinstance(o, AppendJournal):
            replies += [r for r in core.step(JournalDurable(o.token)) if isinstance(r, Reply)]
    (reply,) = replies
    assert isinstance(reply.response, AddResponse)
    return reply.response.code


def test_the_core_refuses_adds_to_a_forgotten_ledger() -> None:
    core = BookieCore()
    assert answer(core, add(7, 0)) is ErrorCode.EOK
    core.step(ForgetLedger(7))
    assert answer(core, add(7, 1)) is ErrorCode.EFENCED
    assert answer(core, add(7, 1, recovery=True)) is ErrorCode.EFENCED  # no write-back resurrects it either
    assert 7 not in core.ledgers
    assert answer(core, add(8, 0)) is ErrorCode.EOK  # other ledgers are untouched
    core.step(ForgetLedger(9))
    assert answer(core, add(9, 0)) is ErrorCode.EFENCED  # unknown here, deleted all the same


def test_ledger_storage_keeps_the_deleted_ids_across_reopening(tmp_path: Path) -> None:
    storage = LedgerStorage(tmp_path)
    assert storage.deleted_ledgers() == set()
    storage.delete_ledger(3)
    storage.delete_ledger(12)
    assert LedgerStorage(tmp_path).deleted_ledgers() == {3, 12}
    with open(tmp_path / DELETED_LEDGERS, "a", encoding="ascii") as f:
        f.write("4")  # torn by a crash: its ledger is still indexed and is collected again
    assert LedgerStorage(tmp_path).deleted_ledgers() == {3, 12}


def test_a_bookie_process_refuses_adds_to_a_collected_ledger_also_after_a_restart(tmp_path: Path) -> None:
    metadata = f"embedded://{tmp_path / 'meta'}"
    store = connect(metadata)
    ledgers = LedgerMetadataStore(store)
    doomed = ledgers.create(LedgerMetadata(1, 1, 1, (Fragment(0, ("127.0.0.1:1",)),), password=b"secret"))
    options = ("--checkpoint-interval", "0.05", "--gc-interval", "0.3")
    try:
        bookie = BookieProcess(tmp_path / "data", metadata, *options)
        try:
            channel = BookieChannel(bookie.address)
            assert channel.call(add(doomed, 0)).code is ErrorCode.EOK  # the ledger's first writer
            ledgers.delete(doomed)  # trimmed by another broker
            wait_for(
                lambda: channel.call(ReadLacRequest(doomed)).code is ErrorCode.ENOLEDGER,
                "garbage collection of the deleted ledger",
            )
            assert channel.call(add(doomed, 1)).code is ErrorCode.EFENCED  # the stale writer's next add
            channel.close()
        finally:
            bookie.kill()
        bookie = BookieProcess(tmp_path / "data", metadata, *options)
        try:
            channel = BookieChannel(bookie.address)
            assert channel.call(add(doomed, 1)).code is ErrorCode.EFENCED
            channel.close()
        finally:
            bookie.kill()
    finally:
        store.close()
