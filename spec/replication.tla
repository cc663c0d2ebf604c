----------------------------- MODULE replication -----------------------------
(***************************************************************************)
(* Geo-replication of one topic between the clusters of a Pulsar instance. *)
(*                                                                         *)
(* Each cluster keeps the topic in its own managed ledger, abstracted to   *)
(* the sequence of its persisted entries (`log[c]`: an entry is there once *)
(* it is acknowledged to whoever published it).  Each cluster has one      *)
(* local producer, named after its cluster, which publishes sequence ids   *)
(* 1, 2, ...  For every ordered pair <<c, r>> of clusters the broker that  *)
(* owns the topic in c runs a replicator: a durable cursor on c's managed  *)
(* ledger named `pulsar.repl.<r>`, which reads entries and publishes them  *)
(* to r's topic through a producer, keeping the origin's metadata          *)
(* (producer name, sequence id) and setting `replicated_from` to c.        *)
(*                                                                         *)
(*  - The cursor (mark-delete position) advances only past entries the    *)
(*    remote acknowledged (send receipts), or entries the replicator skips.*)
(*  - An entry with `replicated_from` set arrived by replication: it is    *)
(*    skipped, never replicated again.                                     *)
(*  - The remote de-duplicates on producer name + sequence id (the highest *)
(*    sequence id persisted per producer), when `Dedup` is on.             *)
(*  - The broker of a cluster crashes and restarts, or the topic moves to  *)
(*    another broker (ownership change): its replicators start again from  *)
(*    their persisted cursor, and the connections to and from it are lost  *)
(*    (the other clusters' replicators rewind to their cursor, as their    *)
(*    producers reconnect and send again what was not acknowledged).       *)
(*                                                                         *)
(* Connections are FIFO (TCP): messages and receipts are lost only with    *)
(* their connection.  Mutations (CONSTANT switches, so the text shows      *)
(* where each bug lives): AckBeforeReceipt (the cursor is acknowledged     *)
(* when the entry is sent: loss), Dedup = FALSE (duplicates), and          *)
(* ReplicateReplicated (a replicated message is replicated again: loop).   *)
(* Every action sets `lastAction` (outside the VIEW) for conformance/.     *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Clusters,            \* cluster names (model values); each one's local producer has its name
    Producing,           \* the clusters whose local producer publishes (a subset of Clusters)
    NumBrokers,          \* brokers per cluster that can own the topic (1..NumBrokers)
    MaxMsgs,             \* messages each local producer publishes (sequence ids 1..MaxMsgs)
    MaxFaults,           \* broker crashes and ownership changes, in total
    Dedup,               \* the topics de-duplicate on producer name + sequence id
    AckBeforeReceipt,    \* mutation: the cursor is acknowledged when the entry is sent (loss)
    ReplicateReplicated  \* mutation: entries that arrived by replication are replicated too (loop)

ASSUME /\ Dedup \in BOOLEAN /\ AckBeforeReceipt \in BOOLEAN /\ ReplicateReplicated \in BOOLEAN
       /\ {NumBrokers, MaxMsgs, MaxFaults} \subseteq Nat /\ NumBrokers >= 1 /\ Producing \subseteq Clusters

None == "none"          \* replFrom of an entry published locally

\* Issue 47 (overridden in a mutation model's CONSTANTS; conformance refuses its counterexamples):
\* "receipt_keeps_cursor" (a receipt moves nothing: the cursor is not the mark-delete position),
\* "receipt_ignored" (a receipt is dropped unmatched: its entry waits for ever, the cursor stops),
\* "remote_takes_last" (the remote persists the newest message in flight first: out of order),
\* "reads_first_only" (a replicator reads only its log's first entry, then stops),
\* "mark_delete_past_waiting" (the mark-delete includes the first entry still waiting for its receipt:
\* TypeOK's cursor < outstanding fails).
Mutation == "none"

\* The replicators: <<origin, remote>>.
Pairs == {x \in Clusters \X Clusters : x[1] # x[2]}

VARIABLES
    log,          \* [Clusters -> Seq(entry)]: each cluster's managed ledger; entry = [producer, seq, replFrom]
    highestSeq,   \* [Clusters -> [Clusters -> Nat]]: de-duplication state: highest sequence id persisted per producer
    cursor,       \* [Pairs -> Nat]: the durable cursor `pulsar.repl.<remote>`: entries 1..cursor are acknowledged
    readPos,      \* [Pairs -> Nat]: the replicator's read position: entries 1..readPos were read (in memory)
    outstanding,  \* [Pairs -> Seq(Nat)]: entries sent to the remote, no receipt yet, in order (in memory)
    inflight,     \* [Pairs -> Seq(message)]: the replicator's producer connection; message = [pos, producer, seq, replFrom]
    receipts,     \* [Pairs -> Seq(Nat)]: send receipts on their way back (the origin position of each)
    owner,        \* [Clusters -> 1..NumBrokers]: the broker that owns the topic in each cluster
    faults,       \* crashes and ownership changes so far
    lastAction    \* auxiliary, for conformance: [name, params] of the last action (not in the VIEW)

vars == <<log, highestSeq, cursor, readPos, outstanding, inflight, receipts, owner, faults, lastAction>>
view == <<log, highestSeq, cursor, readPos, outstanding, inflight, receipts, owner, faults>>

-----------------------------------------------------------------------------
Init ==
    /\ log = [c \in Clusters |-> <<>>]
    /\ highestSeq = [c \in Clusters |-> [p \in Clusters |-> 0]]
    /\ cursor = [x \in Pairs |-> 0]
    /\ readPos = [x \in Pairs |-> 0]
    /\ outstanding = [x \in Pairs |-> <<>>]
    /\ inflight = [x \in Pairs |-> <<>>]
    /\ receipts = [x \in Pairs |-> <<>>]
    /\ owner = [c \in Clusters |-> 1]
    /\ faults = 0
    /\ lastAction = [name |-> "Init", params |-> [none |-> 0]]

IsLocal(e) == e.replFrom = None
Published(c) == Len(SelectSeq(log[c], IsLocal))
InLog(c, p, s) == \E i \in 1..Len(log[c]) : log[c][i].producer = p /\ log[c][i].seq = s
InFlight(x, i) == \E k \in 1..Len(inflight[x]) : inflight[x][k].pos = i

\* The mark-delete position: every entry read is done (acknowledged or skipped) up to the first
\* one still waiting for its receipt.
MarkDelete(read, waiting) ==
    IF waiting = <<>> THEN read ELSE Head(waiting) - (IF Mutation = "mark_delete_past_waiting" THEN 0 ELSE 1)

\* ---- Producing at the origin ----

\* The cluster's local producer publishes its next sequence id; the entry is persisted (acknowledged).
Publish(c) ==
    /\ c \in Producing
    /\ Published(c) < MaxMsgs
    /\ LET s == Published(c) + 1
       IN /\ log' = [log EXCEPT ![c] = Append(@, [producer |-> c, seq |-> s, replFrom |-> None])]
          /\ highestSeq' = [highestSeq EXCEPT ![c][c] = s]
          /\ lastAction' = [name |-> "Publish", params |-> [cluster |-> c, seq |-> s]]
    /\ UNCHANGED <<cursor, readPos, outstanding, inflight, receipts, owner, faults>>

\* ---- The replicator <<c, r>> ----

\* Read the next entry. A local entry is sent to r with its origin metadata (replFrom = c) and waits
\* for its receipt; an entry that arrived by replication is skipped (acknowledged at once).
ReplicatorReads(c, r) ==
    LET x == <<c, r>>
        pos == readPos[x] + 1
    IN /\ readPos[x] < Len(log[c])
       /\ Mutation = "reads_first_only" => readPos[x] = 0
       /\ LET e == log[c][pos]
              send == IsLocal(e) \/ ReplicateReplicated
              \* mutation: acknowledged when sent, as if the remote had it already
              waits == send /\ ~AckBeforeReceipt
              waiting == IF waits THEN Append(outstanding[x], pos) ELSE outstanding[x]
          IN /\ readPos' = [readPos EXCEPT ![x] = pos]
             /\ outstanding' = [outstanding EXCEPT ![x] = waiting]
             /\ cursor' = [cursor EXCEPT ![x] = MarkDelete(pos, waiting)]
             /\ inflight' = IF send
                            THEN [inflight EXCEPT ![x] = Append(@, [pos |-> pos, producer |-> e.producer,
                                                                   seq |-> e.seq, replFrom |-> c])]
                            ELSE inflight
             /\ lastAction' = [name |-> "ReplicatorReads", params |-> [origin |-> c, remote |-> r, pos |-> pos,
                                                                        sent |-> send]]
    /\ UNCHANGED <<log, highestSeq, receipts, owner, faults>>

\* The remote's topic takes the next message of the connection: it persists it, unless de-duplication
\* finds its sequence id at or below the highest persisted for its producer; a receipt goes back either way.
RemoteReceives(c, r) ==
    LET x == <<c, r>>
    IN /\ inflight[x] # <<>>
       /\ LET last == Mutation = "remote_takes_last"
              m == IF last THEN inflight[x][Len(inflight[x])] ELSE Head(inflight[x])
              drop == Dedup /\ m.seq <= highestSeq[r][m.producer]
          IN /\ inflight' = [inflight EXCEPT ![x] = IF last THEN SubSeq(@, 1, Len(@) - 1) ELSE Tail(@)]
             /\ receipts' = [receipts EXCEPT ![x] = Append(@, m.pos)]
             /\ IF drop
                THEN UNCHANGED <<log, highestSeq>>
                ELSE /\ log' = [log EXCEPT ![r] = Append(@, [producer |-> m.producer, seq |-> m.seq,
                                                             replFrom |-> m.replFrom])]
                     /\ highestSeq' = [highestSeq EXCEPT ![r][m.producer] = IF m.seq > @ THEN m.seq ELSE @]
             /\ lastAction' = [name |-> "RemoteReceives", params |-> [origin |-> c, remote |-> r, pos |-> m.pos,
                                                                       producer |-> m.producer, seq |-> m.seq,
                                                                       duplicate |-> drop]]
    /\ UNCHANGED <<cursor, readPos, outstanding, owner, faults>>

\* The replicator takes the next receipt: the entry is done, the cursor moves past every done entry.
ReplicatorReceivesReceipt(c, r) ==
    LET x == <<c, r>>
    IN /\ receipts[x] # <<>>
       /\ LET p == Head(receipts[x])
              waiting == IF outstanding[x] # <<>> /\ Head(outstanding[x]) = p /\ Mutation # "receipt_ignored"
                         THEN Tail(outstanding[x]) ELSE outstanding[x]
          IN /\ receipts' = [receipts EXCEPT ![x] = Tail(@)]
             /\ outstanding' = [outstanding EXCEPT ![x] = waiting]
             /\ cursor' = IF Mutation = "receipt_keeps_cursor" THEN cursor
                          ELSE [cursor EXCEPT ![x] = MarkDelete(readPos[x], waiting)]
             /\ lastAction' = [name |-> "ReplicatorReceivesReceipt", params |-> [origin |-> c, remote |-> r, pos |-> p]]
    /\ UNCHANGED <<log, highestSeq, readPos, inflight, owner, faults>>

\* ---- Faults ----

Touches(x, c) == x[1] = c \/ x[2] = c

\* Every replicator of c starts again from its persisted cursor, and so does every replicator that
\* sends to c (its producer reconnects); the connections to and from c are lost with what is on them.
Restart(c) ==
    /\ readPos' = [x \in Pairs |-> IF Touches(x, c) THEN cursor[x] ELSE readPos[x]]
    /\ outstanding' = [x \in Pairs |-> IF Touches(x, c) THEN <<>> ELSE outstanding[x]]
    /\ inflight' = [x \in Pairs |-> IF Touches(x, c) THEN <<>> ELSE inflight[x]]
    /\ receipts' = [x \in Pairs |-> IF Touches(x, c) THEN <<>> ELSE receipts[x]]

\* The broker that owns the topic in c crashes and loads it again: the managed ledger (entries, cursors)
\* is durable, and the de-duplication state is rebuilt from the entries (it is what it was).
BrokerCrashes(c) ==
    /\ faults < MaxFaults
    /\ faults' = faults + 1
    /\ Restart(c)
    /\ lastAction' = [name |-> "BrokerCrashes", params |-> [cluster |-> c]]
    /\ UNCHANGED <<log, highestSeq, cursor, owner>>

\* The topic in c moves to broker b (unload, or the owner's session expired): b's replicators resume
\* from the persisted cursors.
OwnershipChange(c, b) ==
    /\ faults < MaxFaults
    /\ b # owner[c]
    /\ faults' = faults + 1
    /\ owner' = [owner EXCEPT ![c] = b]
    /\ Restart(c)
    /\ lastAction' = [name |-> "OwnershipChange", params |-> [cluster |-> c, broker |-> b]]
    /\ UNCHANGED <<log, highestSeq, cursor>>

Next ==
    \/ \E c \in Clusters : Publish(c) \/ BrokerCrashes(c)
    \/ \E c \in Clusters, b \in 1..NumBrokers : OwnershipChange(c, b)
    \/ \E x \in Pairs : ReplicatorReads(x[1], x[2]) \/ RemoteReceives(x[1], x[2])
                        \/ ReplicatorReceivesReceipt(x[1], x[2])

Spec == Init /\ [][Next]_vars

\* Replication makes progress (weak fairness on the replicators, the remotes and the receipts); the
\* producers and the faults need none (faults are bounded, so they stop).
FairSpec ==
    /\ Spec
    /\ \A x \in Pairs : /\ WF_vars(ReplicatorReads(x[1], x[2]))
                        /\ WF_vars(RemoteReceives(x[1], x[2]))
                        /\ WF_vars(ReplicatorReceivesReceipt(x[1], x[2]))

-----------------------------------------------------------------------------
\* ---- Invariants and properties ----

Entry == [producer : Clusters, seq : 1..MaxMsgs, replFrom : Clusters \cup {None}]
Message == [pos : Nat, producer : Clusters, seq : 1..MaxMsgs, replFrom : Clusters]

TypeOK ==
    /\ \A c \in Clusters : \A i \in 1..Len(log[c]) : log[c][i] \in Entry
    /\ highestSeq \in [Clusters -> [Clusters -> 0..MaxMsgs]]
    /\ \A x \in Pairs :
        /\ cursor[x] <= readPos[x] /\ readPos[x] <= Len(log[x[1]])
        /\ \A k \in 1..Len(outstanding[x]) : cursor[x] < outstanding[x][k] /\ outstanding[x][k] <= readPos[x]
        /\ \A k \in 1..Len(inflight[x]) : inflight[x][k] \in Message
    /\ owner \in [Clusters -> 1..NumBrokers]
    /\ faults \in 0..MaxFaults

\* Nothing lost: every local entry the cursor acknowledged is in the remote's log, or on its way there.
NoLoss ==
    \A x \in Pairs : \A i \in 1..cursor[x] :
        LET e == log[x[1]][i]
        IN IsLocal(e) => (InLog(x[2], e.producer, e.seq) \/ InFlight(x, i))

\* No message twice in a log (with de-duplication on).
NoDuplicates ==
    \A c \in Clusters : \A i, j \in 1..Len(log[c]) :
        i < j => ~(log[c][i].producer = log[c][j].producer /\ log[c][i].seq = log[c][j].seq)

\* Per-producer order: in every log, each producer's sequence ids increase.
ProducerOrder ==
    \A c \in Clusters : \A i, j \in 1..Len(log[c]) :
        (i < j /\ log[c][i].producer = log[c][j].producer) => log[c][i].seq < log[c][j].seq

\* No loop: only a message's origin replicates it (a replicated entry comes straight from its
\* producer's cluster, and a replicator sends only its own cluster's producers' messages).
NoLoop ==
    /\ \A c \in Clusters : \A i \in 1..Len(log[c]) : log[c][i].replFrom \in {None, log[c][i].producer}
    /\ \A x \in Pairs : \A k \in 1..Len(inflight[x]) : inflight[x][k].producer = x[1]

\* The cursor is where the replicator's own state says (mark-delete = before the first entry waiting).
CursorIsMarkDelete == \A x \in Pairs : cursor[x] = MarkDelete(readPos[x], outstanding[x])

\* Reachability witness (its model expects TLC to violate it, so NoDuplicates is not vacuous): the
\* remote drops a message sent again as a duplicate.
WitnessNoDuplicateDropped == ~(lastAction.name = "RemoteReceives" /\ lastAction.params.duplicate)

\* Liveness (under FairSpec): every message acknowledged at its origin reaches every other cluster.
ReplicationCatchesUp ==
    \A x \in Pairs : \A n \in 1..MaxMsgs : (x[1] \in Producing /\ Published(x[1]) >= n) ~> InLog(x[2], x[1], n)

\* Liveness (issue 47): each replicator's own cursor reaches the end of the log it replicates, and stays
\* there. ReplicationCatchesUp looks at the remote only: a cursor stuck for ever (receipts ignored,
\* mutation "receipt_ignored") passes it, while the origin keeps re-sending after every restart and can
\* never trim its log.
ReplicatorCursorReachesEnd == \A x \in Pairs : <>[](cursor[x] = Len(log[x[1]]))
=============================================================================
