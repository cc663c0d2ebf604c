"""Bookie placement: choose E distinct writable bookies for a new ensemble, or one replacement.

Pure: the shell passes the registry view (writable and read-only bookies, with their rack
labels) and its randomness as a preference order (e.g. a shuffled list of bookie ids);
the same inputs always give the same ensemble.

Rack/zone awareness, when bookies carry a rack label: no two replicas of one write set
(Qw consecutive ensemble positions, cyclically) in one rack while enough racks exist;
otherwise fall back to the preference order, as BookKeeper does when it does not
enforce a minimum number of racks per write quorum.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from impl.bookie.client.errors import PlacementError
from impl.metadata.ledger import BookieId


@dataclass(frozen=True)
class BookieInfo:
    bookie_id: BookieId
    rack: str | None = None  # rack or zone label, as registered
    read_only: bool = False


@dataclass(frozen=True)
class Placement:
    ensemble: tuple[BookieId, ...]
    rack_aware: bool  # True: every write set spans Qw distinct racks


def _writable(bookies: Sequence[BookieInfo], preference: Sequence[BookieId]) -> list[BookieInfo]:
    rank = {b: i for i, b in enumerate(preference)}
    candidates = [b for b in bookies if not b.read_only]
    # Bookies missing from the preference order go last, in registry order.
    return sorted(candidates, key=lambda b: rank.get(b.bookie_id, len(rank)))


def _window_clash(
    racks: list[str | None], position: int, rack: str | None, ensemble_size: int, write_quorum: int
) -> bool:
    """Would `rack` at `position` share a write set with an equal, already placed rack?"""
    if rack is None:
        return False
    for offset in range(1, write_quorum):
        for neighbour in ((position - offset) % ensemble_size, (position + offset) % ensemble_size):
            if neighbour != position and racks[neighbour] == rack:
                return True
    return False


def _rack_aware(candidates: list[BookieInfo], ensemble_size: int, write_quorum: int) -> list[BookieInfo] | None:
    """Backtracking in preference order (E is small); None when no rack-distinct ensemble exists."""
    if len({c.rack for c in candidates}) < write_quorum:
        return None
    chosen: list[BookieInfo] = []
    racks: list[str | None] = [None] * ensemble_size
    used: set[BookieId] = set()

    def place(position: int) -> bool:
        if position == ensemble_size:
            return True
        for candidate in candidates:
            if candidate.bookie_id in used or _window_clash(
                racks, position, candidate.rack, ensemble_size, write_quorum
            ):
                continue
            chosen.append(candidate)
            used.add(candidate.bookie_id)
            racks[position] = candidate.rack
            if place(position + 1):
                return True
            chosen.pop()
            used.discard(candidate.bookie_id)
            racks[position] = None
        return False

    return chosen if place(0) else None


def choose_ensemble(
    bookies: Sequence[BookieInfo], ensemble_size: int, write_quorum: int, preference: Sequence[BookieId]
) -> Placement:
    if not 1 <= write_quorum <= ensemble_size:
        raise ValueError(f"need 1 <= Qw <= E, got E={ensemble_size} Qw={write_quorum}")
    if len({b.bookie_id for b in bookies}) != len(bookies):
        raise ValueError("the registry view lists a bookie twice")
    candidates = _writable(bookies, preference)
    if len(candidates) < ensemble_size:
        raise PlacementError(
            f"need {ensemble_size} writable bookies, have {len(candidates)} "
            f"({sum(b.read_only for b in bookies)} read-only); start more bookies or lower the ensemble size"
        )
    if all(b.rack is not None for b in candidates):
        racked = _rack_aware(candidates, ensemble_size, write_quorum)
        if racked is not None:
            return Placement(tuple(b.bookie_id for b in racked), True)
    return Placement(tuple(b.bookie_id for b in candidates[:ensemble_size]), False)


def choose_replacement(
    bookies: Sequence[BookieInfo],
    ensemble: Sequence[BookieId],
    failed: BookieId,
    write_quorum: int,
    preference: Sequence[BookieId],
) -> BookieId:
    """A writable bookie outside `ensemble` for failed's position; rack-distinct from its write sets if possible."""
    if failed not in ensemble:
        raise ValueError(f"{failed} is not in the ensemble {tuple(ensemble)}")
    position = list(ensemble).index(failed)
    candidates = [b for b in _writable(bookies, preference) if b.bookie_id not in ensemble]
    if not candidates:
        raise PlacementError(f"no writable bookie outside {tuple(ensemble)} to replace {failed}; start another bookie")
    rack_of = {b.bookie_id: b.rack for b in bookies}
    racks = [None if i == position else rack_of.get(b) for i, b in enumerate(ensemble)]
    for candidate in candidates:
        if not _window_clash(racks, position, candidate.rack, len(ensemble), write_quorum):
            return candidate.bookie_id
    return candidates[0].bookie_id
