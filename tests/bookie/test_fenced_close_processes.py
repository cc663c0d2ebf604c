"""A fenced write handle's close over real bookie processes (issue 26, item 1).

Four `pulsar-ref bookie` processes (one a spare for the recovery's write-back) on an embedded metadata
store; the writer and the recoverer are two clients with their own metadata sessions, as two
applications are. The handle's close reports what is
stored: the closed metadata when the recovery closed the ledger at the end the handle acknowledged,
MetadataVersionError (carrying the stored metadata) when it closed it further; every later close says
the same, and nothing the handle reports contradicts the store.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from impl.bookie.client.errors import LedgerFencedError, MetadataVersionError
from impl.metadata.ledger import LedgerState
from tests.client.real_cluster import BookieCluster, bookie_cluster
from tests.client.test_real_bookies import wait_until_stored

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]

PASSWORD = b"secret"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BookieCluster]:
    directory = tmp_path_factory.mktemp("fenced-close")
    with bookie_cluster(directory, f"embedded://{directory / 'metadata'}", 4) as cluster:
        yield cluster


def test_a_fenced_handle_closes_with_the_recoverys_close_when_they_agree(cluster: BookieCluster) -> None:
    with cluster.client() as writer_client, cluster.client() as recoverer:
        writer = writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        for i in range(10):
            assert writer.add(b"entry-%d" % i) == i
        recovered = recoverer.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
        assert recovered.last_add_confirmed == 9
        with pytest.raises(LedgerFencedError, match="fenced by a recovery"):
            writer.add(b"late")

        closes = [writer.close() for _ in range(3)]

        stored, _ = recoverer.ledgers.read(writer.ledger_id)
        assert stored.state is LedgerState.CLOSED and stored.last_entry_id == 9
        assert closes == [stored] * 3 == [recovered.metadata] * 3
        assert writer.metadata == stored


def test_a_fenced_handle_is_told_the_conflict_when_the_recovery_closed_further(cluster: BookieCluster) -> None:
    """Qa=3 and one bookie hung: entry 10 reaches two bookies, the writer never sees it confirmed (LAC 9);
    the recovery finds it and closes at 10. The fenced writer's close is refused, every time alike."""
    with cluster.client(request_timeout_s=20) as writer_client, cluster.client(request_timeout_s=2) as recoverer:
        writer = writer_client.create_ledger(3, 3, 3, password=PASSWORD)
        for i in range(10):
            writer.add(b"entry-%d" % i)
        hung = writer.metadata.last_ensemble[2]
        with cluster.hung(hung):
            pending = writer.add_async(b"entry-10")
            live = [b for b in writer.metadata.last_ensemble if b != hung]
            wait_until_stored(live, writer.ledger_id, 10)
            recovered = recoverer.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
            assert recovered.last_add_confirmed == 10
            with pytest.raises(LedgerFencedError):
                writer.add(b"late")  # EFENCED from the live bookies: the handle failed
            with pytest.raises(LedgerFencedError):
                pending.result(timeout=30)
            assert writer.last_add_confirmed == 9

            errors = []
            for _ in range(3):
                with pytest.raises(MetadataVersionError) as refused:
                    writer.close()
                errors.append(refused.value)

        stored, _ = recoverer.ledgers.read(writer.ledger_id)
        assert (stored.state, stored.last_entry_id) == (LedgerState.CLOSED, 10)
        assert all(e is errors[0] for e in errors), "every later close says the same"
        assert errors[0].stored == stored == recovered.metadata
        assert (errors[0].last_add_confirmed, errors[0].length) == (9, writer.writer.length)
        assert "already CLOSED at entry 10" in str(errors[0]) and "close with last entry 9" in str(errors[0])
        assert writer.metadata == stored  # the handle's view is the store's, not its stale OPEN one
