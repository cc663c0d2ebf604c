"""Bookie placement: choose E distinct writable bookies for a new ensemble, or one replacement.

Pure: the shell passes the registry view (writable and read-only bookies, with their rack
labels) and its randomness as a preference order (e.g. a shuffled list of bookie ids);
the same inputs always give the same ensemble.

Rack/zone awareness, when bookies carry a rack label: no two replicas of one write set
(Qw consecutive ensemble positions, cyclically) in one rack while enough racks exist;
otherwise fall back to the preference order, as BookKeeper does when it does not
enforce a minimum number of racks per write quorum.

Frame limits, when the client says how large its entries may be (`largest_entry`): a bookie
whose frame limit (nettyMaxFrameSizeBytes, as it registered it) is below that is skipped, so a
too-large entry is refused when a ledger is created, not by the bookie at the add. BookKeeper's
placement does not look at frame limits; Pulsar does not check them at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from impl.bookie.client.errors import PlacementError
from impl.bookie.core import DEFAULT_MAX_ENTRY_SIZE
from impl.metadata.ledger import BookieId

# What a bookie that publishes no frame limit (one older than the property) is taken to have: the
# bookies' own default, Pulsar's bookkeeper.conf value (5 MiB + 10 KiB), which every such bookie of
# this project ran unless configured. BookKeeper's bare default (5 MiB) would refuse them all to a
# broker with Pulsar's default maxMessageSize, whose entries need the 10 KiB more.
UNPUBLISHED_FRAME_SIZE = DEFAULT_MAX_ENTRY_SIZE


def frame_limit(published: int | None) -> int:
    """A bookie's frame limit: as it published it, or the default assumed for one that did not."""
    return UNPUBLISHED_FRAME_SIZE if published is None else published


@dataclass(frozen=True)
class BookieInfo:
    bookie_id: BookieId
    rack: str | None = None  # rack or zone label, as registered
    read_only: bool = False
    netty_max_frame_size_bytes: int | None = None  # as registered; None: not published


@dataclass(frozen=True)
class Placement:
    ensemble: tuple[BookieId, ...]
    rack_aware: bool  # True: every write set spans Qw distinct racks
    too_small: tuple[BookieInfo, ...] = ()  # writable bookies skipped: their frame is below the largest entry


def _too_small(bookie: BookieInfo, largest_entry: int | None) -> bool:
    return largest_entry is not None and frame_limit(bookie.netty_max_frame_size_bytes) < largest_entry


def _writable(
    bookies: Sequence[BookieInfo], preference: Sequence[BookieId], largest_entry: int | None = None
) -> list[BookieInfo]:
    rank = {b: i for i, b in enumerate(preference)}
    candidates = [b for b in bookies if not b.read_only and not _too_small(b, largest_entry)]
    # Bookies missing from the preference order go last, in registry order.
    return sorted(candidates, key=lambda b: rank.get(b.bookie_id, len(rank)))


def describe_frames(bookies: Sequence[BookieInfo]) -> str:
    """Each bookie as `id (N bytes)`, for messages; an unpublished limit is marked as assumed."""
    return ", ".join(
        f"{b.bookie_id} ({frame_limit(b.netty_max_frame_size_bytes)} bytes"
        f"{'' if b.netty_max_frame_size_bytes is not None else ', not published: assumed'})"
        for b in bookies
    )


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
    bookies: Sequence[BookieInfo],
    ensemble_size: int,
    write_quorum: int,
    preference: Sequence[BookieId],
    largest_entry: int | None = None,
) -> Placement:
    """`largest_entry`: the largest entry body the client may add; bookies whose frame limit is
    below it are left out (Placement.too_small names them). None: frame limits are not looked at."""
    if not 1 <= write_quorum <= ensemble_size:
        raise ValueError(f"need 1 <= Qw <= E, got E={ensemble_size} Qw={write_quorum}")
    if len({b.bookie_id for b in bookies}) != len(bookies):
        raise ValueError("the registry view lists a bookie twice")
    candidates = _writable(bookies, preference, largest_entry)
    too_small = tuple(b for b in bookies if not b.read_only and _too_small(b, largest_entry))
    if len(candidates) < ensemble_size:
        skipped = (
            f"; {len(too_small)} skipped, their frame limit (nettyMaxFrameSizeBytes) below the largest "
            f"entry of {largest_entry} bytes: {describe_frames(too_small)}; raise their "
            "--netty-max-frame-size-bytes or lower the brokers' --max-message-size"
            if too_small
            else ""
        )
        # BookKeeper's BKNotEnoughBookiesException, with its message first.
        raise PlacementError(
            f"Not enough non-faulty bookies available: need {ensemble_size} writable bookies, have "
            f"{len(candidates)} ({sum(b.read_only for b in bookies)} read-only{skipped}); start more bookies "
            "or lower the ensemble size"
        )
    if all(b.rack is not None for b in candidates):
        racked = _rack_aware(candidates, ensemble_size, write_quorum)
        if racked is not None:
            return Placement(tuple(b.bookie_id for b in racked), True, too_small)
    return Placement(tuple(b.bookie_id for b in candidates[:ensemble_size]), False, too_small)


def choose_replacement(
    bookies: Sequence[BookieInfo],
    ensemble: Sequence[BookieId],
    failed: BookieId,
    write_quorum: int,
    preference: Sequence[BookieId],
    largest_entry: int | None = None,
) -> BookieId:
    """A writable bookie outside `ensemble` for failed's position; rack-distinct from its write sets if possible.
    `largest_entry` as for choose_ensemble: a bookie whose frame limit is below it is no replacement."""
    if failed not in ensemble:
        raise ValueError(f"{failed} is not in the ensemble {tuple(ensemble)}")
    position = list(ensemble).index(failed)
    candidates = [b for b in _writable(bookies, preference, largest_entry) if b.bookie_id not in ensemble]
    if not candidates:
        too_small = [
            b for b in bookies if not b.read_only and b.bookie_id not in ensemble and _too_small(b, largest_entry)
        ]
        skipped = f" (frame limit below the largest entry of {largest_entry} bytes: {describe_frames(too_small)})"
        raise PlacementError(
            f"no writable bookie outside {tuple(ensemble)} to replace {failed}{skipped if too_small else ''}; "
            "start another bookie"
        )
    rack_of = {b.bookie_id: b.rack for b in bookies}
    racks = [None if i == position else rack_of.get(b) for i, b in enumerate(ensemble)]
    for candidate in candidates:
        if not _window_clash(racks, position, candidate.rack, len(ensemble), write_quorum):
            return candidate.bookie_id
    return candidates[0].bookie_id
