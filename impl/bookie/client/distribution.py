"""The distribution schedule: which bookies store an entry, and when a quorum has spoken.

Pure functions over bookie *indices* in a fragment's ensemble (0..E-1), following
BookKeeper's round-robin schedule (docs/protocol-rules.md, "Adding entries" and "Recovery"):

- write set of entry e: indices (e + i) mod E for i in 0..Qw-1 (absolute entry id);
- an add completes once Qa bookies of its write set acknowledged it;
- read-LAC coverage: done once, for every one of the E write sets, fewer than Qa of its
  bookies are still unknown (no answer, or an error); then no writer can still reach Qa;
- recovery-read end: Qw-Qa+1 negative answers (ENOENTRY/ENOLEDGER) from an entry's
  write set mean that entry can never have been acknowledged.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping

from impl.bookie.protocol import ErrorCode
from impl.metadata.ledger import write_set_indices


class Answer(enum.Enum):
    """How one bookie answered a read: what the coverage and end rules count."""

    OK = "ok"
    NO_ENTRY = "no-entry"  # ENOENTRY
    NO_LEDGER = "no-ledger"  # ENOLEDGER
    ERROR = "error"  # any other code, or a reply that failed verification
    NONE = "none"  # no answer (yet, or timed out)

    @property
    def is_known(self) -> bool:
        """OK, ENOENTRY and ENOLEDGER are answers; errors and silence are unknown."""
        return self in (Answer.OK, Answer.NO_ENTRY, Answer.NO_LEDGER)

    @property
    def is_negative(self) -> bool:
        return self in (Answer.NO_ENTRY, Answer.NO_LEDGER)

    @staticmethod
    def from_code(code: ErrorCode) -> Answer:
        if code is ErrorCode.EOK:
            return Answer.OK
        if code is ErrorCode.ENOENTRY:
            return Answer.NO_ENTRY
        if code is ErrorCode.ENOLEDGER:
            return Answer.NO_LEDGER
        return Answer.ERROR


KNOWN = frozenset({Answer.OK, Answer.NO_ENTRY, Answer.NO_LEDGER})


def count(answers: Mapping[int, Answer], indices: Iterable[int], kinds: Collection[Answer]) -> int:
    """How many of `indices` answered with one of `kinds` (a missing index is Answer.NONE)."""
    return sum(1 for i in indices if answers.get(i, Answer.NONE) in kinds)


def check_quorums(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """Raise ValueError unless 1 <= Qa <= Qw <= E."""
    if not (1 <= ack_quorum <= write_quorum <= ensemble_size):
        raise ValueError(
            f"need 1 <= Qa <= Qw <= E, got E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}; "
            "fix the ledger's quorums"
        )


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> tuple[int, ...]:
    """Indices in the fragment's ensemble of the Qw bookies that store entry_id.

    pre: 0 <= entry_id
    pre: 1 <= write_quorum <= ensemble_size
    post: len(__return__) == write_quorum
    post: len(set(__return__)) == write_quorum
    post: all(0 <= i < ensemble_size for i in __return__)
    post: __return__ == write_set(entry_id + ensemble_size, ensemble_size, write_quorum)
    """
    return write_set_indices(entry_id, ensemble_size, write_quorum)


def all_write_sets(ensemble_size: int, write_quorum: int) -> tuple[tuple[int, ...], ...]:
    """The E distinct write sets of the round-robin schedule (entries 0..E-1 cover them all)."""
    return tuple(write_set(e, ensemble_size, write_quorum) for e in range(ensemble_size))


def ack_quorum_reached(
    acked: Collection[int], entry_id: int, ensemble_size: int, write_quorum: int, ack_quorum: int
) -> bool:
    """True once Qa bookies *of entry_id's write set* acknowledged it (acks elsewhere do not count).

    pre: 0 <= entry_id
    pre: 1 <= ack_quorum <= write_quorum <= ensemble_size
    post: not __return__ or len(set(acked)) >= ack_quorum
    post: __return__ or len(set(acked) & set(range(ensemble_size))) < ensemble_size or ensemble_size < ack_quorum
    """
    members = set(write_set(entry_id, ensemble_size, write_quorum))
    return len(members.intersection(acked)) >= ack_quorum


def lac_coverage_reached(answers: Mapping[int, Answer], ensemble_size: int, write_quorum: int, ack_quorum: int) -> bool:
    """Read-LAC is done: every write set has fewer than Qa bookies still unknown.

    `answers` maps bookie index to its answer; a missing index counts as Answer.NONE.

    pre: 1 <= ack_quorum <= write_quorum <= ensemble_size <= 6
    post: not __return__ or count(answers, range(ensemble_size), KNOWN) >= write_quorum - ack_quorum + 1
    post: __return__ or count(answers, range(ensemble_size), KNOWN) < ensemble_size
    """
    check_quorums(ensemble_size, write_quorum, ack_quorum)
    for members in all_write_sets(ensemble_size, write_quorum):
        unknown = sum(1 for i in members if not answers.get(i, Answer.NONE).is_known)
        if unknown >= ack_quorum:
            return False
    return True


def entry_absent(
    answers: Mapping[int, Answer], entry_id: int, ensemble_size: int, write_quorum: int, ack_quorum: int
) -> bool:
    """Recovery-read end rule: Qw-Qa+1 negatives in entry_id's write set = never acknowledged.

    An entry acknowledged by Qa bookies of its write set can never look absent:
    pre: 0 <= entry_id
    pre: 1 <= ack_quorum <= write_quorum <= ensemble_size <= 6
    post: not __return__ or count(answers, write_set(entry_id, ensemble_size, write_quorum), {Answer.OK}) < ack_quorum
    """
    check_quorums(ensemble_size, write_quorum, ack_quorum)
    members = write_set(entry_id, ensemble_size, write_quorum)
    negatives = sum(1 for i in members if answers.get(i, Answer.NONE).is_negative)
    return negatives >= write_quorum - ack_quorum + 1


def entry_present(answers: Mapping[int, Answer], entry_id: int, ensemble_size: int, write_quorum: int) -> bool:
    """One OK from entry_id's write set: the entry exists (it may or may not have been acknowledged)."""
    return any(answers.get(i, Answer.NONE) is Answer.OK for i in write_set(entry_id, ensemble_size, write_quorum))
