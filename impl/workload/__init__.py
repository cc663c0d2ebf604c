"""The Jepsen-style workload: logical processes append and read through the Pulsar client while a
nemesis injects faults, and every step goes to a history (docs/history.md).

- `history`: the history writer (one monotonic clock, one index sequence, JSON Lines).
- `operations`: one append or read through the client, and how its outcome is classified.
- `nemesis`: the fault schedule, applied through impl.cluster's verbs.
- `run`: the processes, pacing, progress and the final reads.

Nothing here imports spark/: the audit must not share code with what it checks.
"""
