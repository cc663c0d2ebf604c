--------------------------- MODULE producer_access ---------------------------
(***************************************************************************)
(* A topic's producer slot under Pulsar's access modes (issue 47, item 3): *)
(* Exclusive (refused while another holds or waits), WaitForExclusive      *)
(* (queued, granted in arrival order when the slot frees) and              *)
(* ExclusiveWithFencing (takes the slot: the holder is closed, the waiters *)
(* refused).  Each grant of a new producer moves the topic epoch on; the   *)
(* epoch is kept in the metadata store, so a new owner of the topic goes   *)
(* on from it, and a holder reconnecting after a failover keeps its grant  *)
(* only while the epoch is still its own.  Shared producers are left out:  *)
(* they never hold the slot, only keep exclusive ones away.                *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    Exclusive,     \* producers connecting with Exclusive
    Waiting,       \* ... with WaitForExclusive
    Fencing,       \* ... with ExclusiveWithFencing
    NumBrokers,    \* brokers that can own the topic
    MaxConnects,   \* new connections (first connects) in all
    MaxFaults      \* producer connections that die and broker failovers, in all

Producers == Exclusive \cup Waiting \cup Fencing
ASSUME /\ Exclusive \cap Waiting = {} /\ Exclusive \cap Fencing = {} /\ Waiting \cap Fencing = {}
       /\ {NumBrokers, MaxConnects, MaxFaults} \subseteq Nat /\ NumBrokers >= 1

\* A model overrides it in its CONSTANTS: "fencing_keeps_epoch" (ExclusiveWithFencing takes the slot
\* without moving the epoch on), "fencing_keeps_holder" (the fenced holder is not closed),
\* "leave_does_not_grant" (a holder leaving does not hand the slot to the queue's head).
Mutation == "none"

VARIABLES
    view,       \* [Producers -> {"idle", "waiting", "granted", "reconnecting", "done"}]: each client's state
    myEpoch,    \* [Producers -> Nat]: the topic epoch of the client's grant (0: never granted)
    holder,     \* the producer the owning broker has granted the slot to, or None
    queue,      \* Seq(Producers): the WaitForExclusive producers waiting at the owning broker, in order
    epoch,      \* the topic epoch in the metadata store (0: no exclusive producer yet)
    owner,      \* 1..NumBrokers: the broker owning the topic
    connects, faults,
    grants      \* ghost, read by no action: {<<producer, epoch>>} of every grant made

vars == <<view, myEpoch, holder, queue, epoch, owner, connects, faults, grants>>
None == "none"

Init ==
    /\ view = [p \in Producers |-> "idle"]
    /\ myEpoch = [p \in Producers |-> 0]
    /\ holder = None /\ queue = <<>> /\ epoch = 0 /\ owner = 1
    /\ connects = 0 /\ faults = 0 /\ grants = {}

Free == holder = None /\ queue = <<>>
InQueue(p) == \E i \in 1..Len(queue) : queue[i] = p
Without(s, p) == SelectSeq(s, LAMBDA q : q # p)

\* p is granted the slot at epoch e (its own, when it regains it after a reconnect).
GrantTo(p, e) ==
    /\ holder' = p
    /\ epoch' = e
    /\ myEpoch' = [myEpoch EXCEPT ![p] = e]
    /\ grants' = grants \cup {<<p, e>>}

\* p asks for the slot (a first connect, or a reconnect after its connection died or the topic moved).
\* A producer whose grant is older than the epoch in the metadata is fenced for good.
Ask(p) ==
    IF myEpoch[p] # 0 /\ myEpoch[p] < epoch
    THEN /\ view' = [view EXCEPT ![p] = "done"]    \* ProducerFenced: the epoch has moved on
         /\ UNCHANGED <<myEpoch, holder, queue, epoch, grants>>
    ELSE IF p \in Fencing
    THEN LET e == IF Mutation = "fencing_keeps_epoch" /\ epoch # 0 THEN epoch ELSE epoch + 1
             closed == IF Mutation = "fencing_keeps_holder" THEN {} ELSE {holder} \cap Producers
         IN /\ GrantTo(p, e)
            /\ queue' = <<>>
            \* the holder is closed and every waiter refused (ProducerFenced): both terminal
            /\ view' = [q \in Producers |-> IF q = p THEN "granted"
                                            ELSE IF q \in closed \/ InQueue(q) THEN "done" ELSE view[q]]
    ELSE IF Free
    THEN /\ GrantTo(p, IF myEpoch[p] = epoch /\ epoch # 0 THEN epoch ELSE epoch + 1)
         /\ view' = [view EXCEPT ![p] = "granted"]
         /\ UNCHANGED queue
    ELSE IF p \in Waiting
    THEN /\ queue' = Append(queue, p)
         /\ view' = [view EXCEPT ![p] = "waiting"]
         /\ UNCHANGED <<myEpoch, holder, epoch, grants>>
    ELSE /\ view' = [view EXCEPT ![p] = "done"]    \* Exclusive refused: the slot is taken (ProducerFenced)
         /\ UNCHANGED <<myEpoch, holder, queue, epoch, grants>>

Connect(p) ==
    /\ view[p] = "idle" /\ connects < MaxConnects
    /\ connects' = connects + 1
    /\ Ask(p)
    /\ UNCHANGED <<owner, faults>>

Reconnect(p) ==
    /\ view[p] = "reconnecting"
    /\ Ask(p)
    /\ UNCHANGED <<owner, connects, faults>>

\* The holder closes its producer.
Leave(p) ==
    /\ view[p] = "granted" /\ holder = p
    /\ holder' = None
    /\ view' = [view EXCEPT ![p] = "done"]
    /\ UNCHANGED <<myEpoch, queue, epoch, owner, connects, faults, grants>>

\* The slot is free and a producer waits: the queue's head is granted at a new epoch.
Grant ==
    /\ holder = None /\ queue # <<>>
    /\ Mutation # "leave_does_not_grant"
    /\ LET p == Head(queue)
       IN /\ GrantTo(p, epoch + 1)
          /\ queue' = Tail(queue)
          /\ view' = [view EXCEPT ![p] = "granted"]
    /\ UNCHANGED <<owner, connects, faults>>

\* Faults: a producer's connection dies (it reconnects), or the topic moves to another broker (every
\* connected producer reconnects to it; the slot and the queue were in the old owner's memory, the
\* epoch is in the metadata store).
ConnectionDies(p) ==
    /\ faults < MaxFaults /\ view[p] \in {"waiting", "granted"}
    /\ faults' = faults + 1
    /\ holder' = IF holder = p THEN None ELSE holder
    /\ queue' = Without(queue, p)
    /\ view' = [view EXCEPT ![p] = "reconnecting"]
    /\ UNCHANGED <<myEpoch, epoch, owner, connects, grants>>

Failover(b) ==
    /\ faults < MaxFaults /\ b # owner
    /\ faults' = faults + 1
    /\ owner' = b
    /\ holder' = None /\ queue' = <<>>
    /\ view' = [p \in Producers |-> IF view[p] \in {"waiting", "granted"} THEN "reconnecting" ELSE view[p]]
    /\ UNCHANGED <<myEpoch, epoch, connects, grants>>

Next ==
    \/ \E p \in Producers : Connect(p) \/ Reconnect(p) \/ Leave(p) \/ ConnectionDies(p)
    \/ Grant
    \/ \E b \in 1..NumBrokers : Failover(b)

Spec == Init /\ [][Next]_vars

\* Weak fairness on leaving, granting and reconnecting: a holder eventually closes its producer,
\* a free slot goes to the queue's head, a client whose connection died reconnects. None on new
\* connections or faults (bounded).
FairSpec ==
    /\ Spec
    /\ WF_vars(Grant)
    /\ \A p \in Producers : WF_vars(Leave(p)) /\ WF_vars(Reconnect(p))

-----------------------------------------------------------------------------
TypeOK ==
    /\ view \in [Producers -> {"idle", "waiting", "granted", "reconnecting", "done"}]
    /\ myEpoch \in [Producers -> Nat] /\ epoch \in Nat
    /\ holder \in Producers \cup {None}
    /\ \A i \in 1..Len(queue) : queue[i] \in Waiting
    /\ owner \in 1..NumBrokers /\ connects \in 0..MaxConnects /\ faults \in 0..MaxFaults

\* Safety, over the ghost history of grants (no action reads it): an epoch is granted to one producer.
AtMostOneExclusivePerEpoch == \A g, h \in grants : g[2] = h[2] => g[1] = h[1]

\* Safety, over the clients' own views: at most one producer believes it holds the slot.
OneHolder == \A p, q \in Producers : view[p] = "granted" /\ view[q] = "granted" => p = q

\* Liveness (under FairSpec): a WaitForExclusive producer that keeps waiting is granted. It leaves
\* "waiting" only by its grant, by being refused (an ExclusiveWithFencing producer took the slot) or
\* by a fault (its connection died, the topic moved: it asks again), so this is "granted unless
\* interrupted".
WaitingProducerGranted == \A p \in Waiting : view[p] = "waiting" ~> view[p] # "waiting"
=============================================================================
