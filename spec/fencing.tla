------------------------------ MODULE fencing ------------------------------
(***************************************************************************)
(* Topic ownership and the managed ledger of ONE topic.                   *)
(*                                                                         *)
(* Brokers hold metadata sessions.  A broker owns the topic's bundle by    *)
(* holding an ephemeral node; when its session expires the node goes, but  *)
(* the broker learns that only later, and in the meantime it keeps acting  *)
(* on what it last read.  The managed ledger's list of ledgers lives in a  *)
(* versioned node and changes only by conditional write.  A takeover       *)
(* recovers (fences and closes) the last ledger on the list, drops it if   *)
(* it is empty (as Pulsar does; it is deleted once the new list is         *)
(* written), creates a new ledger and conditional-writes the list.  The    *)
(* old owner's adds then fail as fenced and its list updates fail with a   *)
(* bad version, after which its managed ledger is FENCED for good (Pulsar  *)
(* issue 17736).                                                           *)
(*                                                                         *)
(* Three CONSTANT switches mark where the classic bugs live (a fourth,     *)
(* with the multi-step rollover, below):                                   *)
(*   FenceOnRecovery = FALSE : ownership by conditional writes alone, the  *)
(*                             recovery closes the ledger's metadata but   *)
(*                             never fences its bookies (mutation 4);      *)
(*   FenceOnBadVersion = FALSE : a managed ledger that keeps writing after *)
(*                             a bad version on rollover (mutation 5);     *)
(*   DeletedLedgerRefusesAdds = FALSE : bookies that forget a deleted      *)
(*                             ledger, fence included, and re-create it on *)
(*                             a stale writer's add (BookKeeper 4462).     *)
(*                                                                         *)
(* MultiStepRollover = TRUE takes a rollover in Pulsar's several steps     *)
(* instead of one: close the current ledger, create the next, write the    *)
(* list by conditional write, then send the adds that arrived meanwhile    *)
(* (queued: Pulsar's pendingAddEntries) to the new ledger, one at a time.  *)
(* Its switch QueuedAddsAwaitListWrite = FALSE sends them to the new       *)
(* ledger as soon as it is created, before its list write: they are        *)
(* acknowledged on a ledger no reader of the list sees, for good if the    *)
(* write then fails (the class of Pulsar issues 12221/14664: a rollover    *)
(* race left acknowledged adds in a ledger no consumer read).              *)
(*                                                                         *)
(* ABSTRACTION OF BOOKKEEPER.  A ledger is abstracted to its entries, a    *)
(* "fenced" flag for its bookies and its metadata state; an add is one     *)
(* atomic step (stored and acknowledged), and recovery is one atomic       *)
(* fence-and-close step at Len(entries).  Why this is sound: these are     *)
(* steps of atomic_ledger.tla (a ledger closed once, at an end between the *)
(* writer's LAC and its last entry pushed, after which the writer confirms *)
(* only entries at or below the end; its content never changes), and       *)
(* ledger.tla REFINES atomic_ledger.tla: TLC checks AtomicLedgerInit and   *)
(* AtomicLedgerSteps on every ledger model, with adds in flight, lost      *)
(* messages, crashes, ensemble changes and two recoverers.  It is NOT      *)
(* that the writer's LAC stops once a recoverer reads: an entry stored on  *)
(* one bookie before its fence can still reach Qa afterwards (TLC shows it *)
(* on ledger-basic); the refinement only needs such an entry to lie at or  *)
(* below the closed end, which it does.  fencing.tla takes the atomic      *)
(* ledger's steps in a restricted combination: an add is a push confirmed  *)
(* at once, and a recovery closes at everything pushed.  Left out: a late  *)
(* acknowledgement (a confirm after another broker's recovery closed the   *)
(* ledger at an end covering it): it can be taken as confirmed before the  *)
(* close, since the producer (one, publishing the next message only once   *)
(* the previous is acknowledged or given up, connected to one broker at a  *)
(* time) has published nothing in between.                                 *)
(* An entry stored but never acknowledged (the broker stops first) is the  *)
(* atomic ledger's Close above the LAC: AddEntryAckLost stores it without  *)
(* an ack, and the next recovery keeps it, so a reader may see a message   *)
(* its producer never had confirmed.  AckedMessagesOnList is what Pulsar   *)
(* promises: acknowledged messages appear, once, in acknowledgement order. *)
(* Concurrent recoveries agree (one close wins: the IN_RECOVERY -> CLOSED  *)
(* conditional write; AtomicLedgerSteps allows one Close only), and a      *)
(* later writer close can only adopt the same end (Rollover's closeOk).    *)
(***************************************************************************)
EXTENDS Naturals, Sequences, FiniteSets

CONSTANTS
    Brokers,            \* broker ids (model values)
    MaxLedgers,         \* ledger ids are 1..MaxLedgers (allocated in order)
    MaxMessages,        \* bound on messages published
    MaxExpiries,        \* bound on metadata session expiries
    MaxLostAcks,        \* bound on adds stored but never acknowledged (AddEntryAckLost)
    FenceOnRecovery,    \* TRUE in the protocol; FALSE = mutation 4
    FenceOnBadVersion,  \* TRUE in the protocol; FALSE = mutation 5 (issue 17736)
    DeletedLedgerRefusesAdds, \* TRUE in pulsar-ref; FALSE = a bookie re-creates a garbage-collected ledger
                              \* on an add (BookKeeper issue 4462, before the bookie kept its deletions)
    MultiStepRollover,  \* FALSE: Rollover is one atomic step; TRUE: Pulsar's steps, adds queued meanwhile
    QueuedAddsAwaitListWrite \* TRUE in Pulsar and pulsar-ref; FALSE = the queued adds are sent to the new
                             \* ledger before its list write (only with MultiStepRollover)

ASSUME /\ MaxLedgers \in Nat \ {0}
       /\ MaxMessages \in Nat
       /\ MaxExpiries \in Nat
       /\ MaxLostAcks \in Nat
       /\ FenceOnRecovery \in BOOLEAN
       /\ FenceOnBadVersion \in BOOLEAN
       /\ DeletedLedgerRefusesAdds \in BOOLEAN
       /\ MultiStepRollover \in BOOLEAN
       /\ QueuedAddsAwaitListWrite \in BOOLEAN

NoBroker == "none"      \* the ownership node does not exist
NoLedger == 0           \* a managed ledger with no current ledger
LedgerIds == 1..MaxLedgers
Messages == 1..MaxMessages

VARIABLES
    session,        \* [Brokers -> {"alive","expired"}]: the broker's metadata session, as the store sees it
    believesOwner,  \* [Brokers -> BOOLEAN]: the broker thinks it owns the bundle (may be stale)
    ownerNode,      \* holder of the ephemeral bundle-ownership node, or NoBroker
    expiries,       \* session expiries so far (bounded by MaxExpiries)
    list,           \* the managed-ledger node: [version, ledgers: Seq(LedgerIds)]
    ledger,         \* [LedgerIds -> [state, entries, lastEntry, fenced]]: BookKeeper, abstracted
    nextLedger,     \* the next ledger id (ids come from a sequential node)
    ml,             \* [Brokers -> managed ledger as that broker sees it]
    acked,          \* Seq([msg, ledger, broker]): messages acknowledged to producers, in order
    nextMsg,        \* the next message to publish
    lostAcks,       \* adds stored but never acknowledged so far (bounded by MaxLostAcks)
    consumed,       \* the subscription's mark-delete position: entries of the topic's log consumed
    trimmed,        \* entries of the log removed with trimmed ledgers (a prefix of the consumed ones)
    lastAction      \* auxiliary, for conformance: [name, params] of the last action (not in the VIEW)

vars == <<session, believesOwner, ownerNode, expiries, list, ledger, nextLedger, ml,
          acked, nextMsg, lostAcks, consumed, trimmed, lastAction>>

\* Fingerprint without lastAction: two states that differ only in how they were reached are one.
view == <<session, believesOwner, ownerNode, expiries, list, ledger, nextLedger, ml,
          acked, nextMsg, lostAcks, consumed, trimmed>>

LedgerStates == {"unused", "open", "closed", "deleted"}
MLStates == {"closed",     \* not loaded on this broker
             "reading",    \* read the list (a snapshot), about to recover its last ledger
             "recovered",  \* last ledger recovered, about to create a ledger and write the list
             "open",       \* writing to ml.current
             "fenced"}     \* terminal: every operation fails until the topic is closed
\* An open managed ledger's rollover (MultiStepRollover): "idle" (none), "creating" (the current ledger is
\* closed, the next not created yet), "writing" (ml.current is the new ledger, its list write is due).
Phases == {"idle", "creating", "writing"}

Range(s) == {s[i] : i \in DOMAIN s}

\* Issue 47: one-rule bugs, each a ci model's (overridden in its CONSTANTS) and each violating a property no
\* other ci model violates (spec/fencing.md, "Mutations"): "fenced_stays" (the broker never closes a FENCED
\* managed ledger: it keeps the topic loaded and refuses every message for ever), "rollover_leaves_open" (a
\* rollover starts the next ledger without closing the current one), "reuses_ledger_id" (a takeover creates
\* its ledger with an id already used), "drops_recovered_ledger" (a takeover drops the recovered last
\* ledger from the list even when it holds entries), "deletes_on_bad_version" (a takeover whose list write
\* failed still deletes the ledgers it meant to drop), "trims_unconsumed" (a trim removes a ledger the
\* subscription has not consumed: TypeOK's trimmed \in 0..consumed fails).
Mutation == "none"

\* Whether the bookies of ledger l would store and acknowledge a plain add. A deleted ledger was
\* garbage-collected at its bookies, its fence with it: it refuses adds only because the bookies keep
\* the ids they collected (BookieCore.deleted); without that (FALSE) an add re-creates it.
Accepts(l) == IF ledger[l].state = "deleted" THEN ~DeletedLedgerRefusesAdds ELSE ~ledger[l].fenced
Last(s) == s[Len(s)]

\* The entries of ledger l that a reader of the list sees: up to the closed end, or all while open.
Visible(l) == IF ledger[l].state = "closed"
              THEN SubSeq(ledger[l].entries, 1, ledger[l].lastEntry)
              ELSE ledger[l].entries

RECURSIVE Concat(_)
Concat(ls) == IF ls = <<>> THEN <<>> ELSE Visible(Head(ls)) \o Concat(Tail(ls))

\* The topic's content as a reader of the metadata sees it.
TopicLog == Concat(list.ledgers)

-----------------------------------------------------------------------------
Init ==
    /\ session = [b \in Brokers |-> "alive"]
    /\ believesOwner = [b \in Brokers |-> FALSE]
    /\ ownerNode = NoBroker
    /\ expiries = 0
    /\ list = [version |-> 0, ledgers |-> <<>>]
    /\ ledger = [l \in LedgerIds |-> [state |-> "unused", entries |-> <<>>, lastEntry |-> 0, fenced |-> FALSE]]
    /\ nextLedger = 1
    /\ ml = [b \in Brokers |-> [state |-> "closed", version |-> 0, ledgers |-> <<>>, current |-> NoLedger,
                                phase |-> "idle", queue |-> <<>>]]
    /\ acked = <<>>
    /\ nextMsg = 1
    /\ lostAcks = 0
    /\ consumed = 0
    /\ trimmed = 0
    /\ lastAction = [name |-> "Init", params |-> [none |-> 0]]

Unloaded == [state |-> "closed", version |-> 0, ledgers |-> <<>>, current |-> NoLedger, phase |-> "idle",
             queue |-> <<>>]

\* The managed ledger m once FENCED: its queued adds fail with it (the producer is told; it gives them up).
Fenced(m) == [m EXCEPT !.state = "fenced", !.phase = "idle", !.queue = <<>>]

\* Whether broker b sends adds to ml.current now: when no rollover is under way, and, in the switch's
\* unsafe variant, also once the rollover's new ledger is created (before its list write).
Sending(b) == \/ ml[b].phase = "idle"
              \/ ml[b].phase = "writing" /\ ~QueuedAddsAwaitListWrite

\* ---- Metadata sessions and ownership ----------------------------------------

\* The store expires b's session (missed heartbeats) and deletes its ephemeral node.
\* The broker is not told: it keeps acting on its beliefs until it reconnects.
ExpireSession(b) ==
    /\ session[b] = "alive"
    /\ expiries < MaxExpiries
    /\ session' = [session EXCEPT ![b] = "expired"]
    /\ ownerNode' = IF ownerNode = b THEN NoBroker ELSE ownerNode
    /\ expiries' = expiries + 1
    /\ lastAction' = [name |-> "ExpireSession", params |-> [broker |-> b]]
    /\ UNCHANGED <<believesOwner, list, ledger, nextLedger, ml, acked, nextMsg, lostAcks, consumed, trimmed>>

\* The broker reconnects with a new session, keeping its (possibly stale) beliefs: Pulsar's
\* metadata client re-establishes sessions and revalidates ownership afterwards.
Reconnect(b) ==
    /\ session[b] = "expired"
    /\ session' = [session EXCEPT ![b] = "alive"]
    /\ lastAction' = [name |-> "Reconnect", params |-> [broker |-> b]]
    /\ UNCHANGED <<believesOwner, ownerNode, expiries, list, ledger, nextLedger, ml, acked, nextMsg, lostAcks,
                   consumed, trimmed>>

\* Create the ephemeral ownership node (fails with NodeExists unless it is absent).
AcquireOwnership(b) ==
    /\ session[b] = "alive"
    /\ ~believesOwner[b]
    /\ ownerNode = NoBroker
    /\ ownerNode' = b
    /\ believesOwner' = [believesOwner EXCEPT ![b] = TRUE]
    /\ lastAction' = [name |-> "AcquireOwnership", params |-> [broker |-> b]]
    /\ UNCHANGED <<session, expiries, list, ledger, nextLedger, ml, acked, nextMsg, lostAcks, consumed, trimmed>>

\* After reconnecting, the broker re-creates its ownership node if nobody took it, or
\* else learns it lost the bundle and unloads the topic.
RevalidateOwnership(b) ==
    /\ session[b] = "alive"
    /\ believesOwner[b]
    /\ ownerNode # b
    /\ IF ownerNode = NoBroker
       THEN /\ ownerNode' = b
            /\ UNCHANGED <<believesOwner, ml>>
       ELSE /\ believesOwner' = [believesOwner EXCEPT ![b] = FALSE]
            /\ ml' = [ml EXCEPT ![b] = Unloaded]
            /\ UNCHANGED ownerNode
    /\ lastAction' = [name |-> "RevalidateOwnership", params |-> [broker |-> b, lost |-> ownerNode # NoBroker]]
    /\ UNCHANGED <<session, expiries, list, ledger, nextLedger, acked, nextMsg, lostAcks, consumed, trimmed>>

\* ---- Managed ledger: open (takeover) ----------------------------------------

\* Read the ledger list and its version: a snapshot that may be stale by the time it is used.
ReadLedgerList(b) ==
    /\ session[b] = "alive"
    /\ believesOwner[b]
    /\ ml[b].state = "closed"
    /\ ml' = [ml EXCEPT ![b] = [state |-> "reading", version |-> list.version,
                                ledgers |-> list.ledgers, current |-> NoLedger, phase |-> "idle", queue |-> <<>>]]
    /\ lastAction' = [name |-> "ReadLedgerList", params |-> [broker |-> b, version |-> list.version]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, ledger, nextLedger, acked, nextMsg, lostAcks,
                   consumed, trimmed>>

\* The number of entries a recovery of l finds: all of an open ledger's, a closed one's end; none
\* of a deleted one (a stale snapshot can list a ledger trimmed since: it opens as empty).
RecoveredEnd(l) == CASE ledger[l].state = "open"   -> Len(ledger[l].entries)
                     [] ledger[l].state = "closed" -> ledger[l].lastEntry
                     [] OTHER                      -> 0

\* Open the last ledger of the snapshot with recovery: one atomic fence-and-close (see the header).
\* A ledger closed (or deleted) already is left as it is.
RecoverLastLedger(b) ==
    /\ session[b] = "alive"
    /\ ml[b].state = "reading"
    /\ LET snap == ml[b].ledgers
           l == IF snap = <<>> THEN NoLedger ELSE Last(snap)
       IN /\ IF l # NoLedger /\ ledger[l].state = "open"
             THEN ledger' = [ledger EXCEPT ![l].state = "closed",
                                           ![l].lastEntry = Len(ledger[l].entries),
                                           ![l].fenced = FenceOnRecovery]
             ELSE UNCHANGED ledger
          /\ lastAction' = [name |-> "RecoverLastLedger", params |-> [broker |-> b, ledger |-> l]]
          \* An empty last ledger is dropped from the snapshot (Pulsar drops it on open and deletes it
          \* once the new list is written).
          /\ ml' = [ml EXCEPT ![b].state = "recovered",
                              ![b].ledgers = IF l # NoLedger /\ (RecoveredEnd(l) = 0 \/ Mutation = "drops_recovered_ledger")
                                             THEN SubSeq(snap, 1, Len(snap) - 1) ELSE snap]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, nextLedger, acked, nextMsg, lostAcks,
                   consumed, trimmed>>

\* Create a ledger and conditional-write the list (snapshot + new ledger) with the version read.
\* A bad version fails the open: the managed ledger is fenced; the new ledger is an orphan.
CreateLedgerAndWriteList(b) ==
    /\ session[b] = "alive"
    /\ ml[b].state = "recovered"
    /\ nextLedger \in LedgerIds
    /\ LET l == nextLedger
           ok == list.version = ml[b].version
           dropped == IF ok \/ Mutation = "deletes_on_bad_version" THEN Range(list.ledgers) \ Range(ml[b].ledgers)
                      ELSE {}
       IN /\ ledger' = [k \in LedgerIds |->
                          IF k = l THEN [ledger[k] EXCEPT !.state = "open"]
                          ELSE IF k \in dropped THEN [ledger[k] EXCEPT !.state = "deleted", !.entries = <<>>]
                          ELSE ledger[k]]
          /\ nextLedger' = IF Mutation = "reuses_ledger_id" THEN nextLedger ELSE nextLedger + 1
          /\ IF ok
             THEN /\ list' = [version |-> list.version + 1, ledgers |-> Append(ml[b].ledgers, l)]
                  /\ ml' = [ml EXCEPT ![b] = [state |-> "open", version |-> list.version + 1,
                                              ledgers |-> Append(ml[b].ledgers, l), current |-> l,
                                              phase |-> "idle", queue |-> <<>>]]
             ELSE /\ ml' = [ml EXCEPT ![b] = Fenced(ml[b])]
                  /\ UNCHANGED list
          /\ lastAction' = [name |-> "CreateLedgerAndWriteList",
                            params |-> [broker |-> b, ledger |-> l, expectedVersion |-> ml[b].version,
                                        badVersion |-> ~ok]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, acked, nextMsg, lostAcks, consumed, trimmed>>

\* ---- Managed ledger: writing ------------------------------------------------

\* Publish the next message to the current ledger.  Bookies do not know about ownership or the
\* ledger's metadata state: they refuse an add only when fenced (or when the ledger is gone).
AddEntry(b) ==
    /\ ml[b].state = "open"
    /\ ml[b].phase = "idle" /\ ml[b].queue = <<>>            \* else it is queued (QueueAddEntry)
    /\ nextMsg \in Messages
    /\ LET l == ml[b].current
           refused == ~Accepts(l)
       IN /\ IF refused
             THEN /\ ml' = [ml EXCEPT ![b] = Fenced(ml[b])]     \* the add fails fenced: fenced for good
                  /\ UNCHANGED <<ledger, acked, nextMsg>>
             ELSE /\ ledger' = [ledger EXCEPT ![l].entries = Append(@, nextMsg)]
                  /\ acked' = Append(acked, [msg |-> nextMsg, ledger |-> l, broker |-> b])
                  /\ nextMsg' = nextMsg + 1
                  /\ UNCHANGED ml
          /\ lastAction' = [name |-> "AddEntry", params |-> [broker |-> b, ledger |-> l, msg |-> nextMsg,
                                                             fenced |-> refused]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, nextLedger, lostAcks, consumed, trimmed>>

\* An add the bookies store but whose acknowledgement never reaches the producer: the broker stops
\* first (it loses its connections, or its process restarts) and closes the topic, keeping its belief
\* that it owns the bundle; its next open recovers the ledger, entry included. The producer gives the
\* message up (the next one is another message). A message in the log that was never acknowledged:
\* the atomic ledger's Close above its LAC (atomic_ledger.tla).
AddEntryAckLost(b) ==
    /\ ml[b].state = "open"
    /\ ml[b].phase = "idle" /\ ml[b].queue = <<>>
    /\ nextMsg \in Messages
    /\ lostAcks < MaxLostAcks
    /\ LET l == ml[b].current IN
       /\ ~ledger[l].fenced /\ ledger[l].state # "deleted"
       /\ ledger' = [ledger EXCEPT ![l].entries = Append(@, nextMsg)]
       /\ lastAction' = [name |-> "AddEntryAckLost", params |-> [broker |-> b, ledger |-> l, msg |-> nextMsg]]
    /\ nextMsg' = nextMsg + 1
    /\ lostAcks' = lostAcks + 1
    /\ ml' = [ml EXCEPT ![b] = Unloaded]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, nextLedger, acked, consumed, trimmed>>

\* Rollover: close the current ledger (writer close), create the next, conditional-write the list.
\* A writer close of a ledger someone already closed succeeds only if the end is the same.
Rollover(b) ==
    /\ ~MultiStepRollover
    /\ session[b] = "alive"
    /\ ml[b].state = "open"
    /\ nextLedger \in LedgerIds
    /\ LET cur == ml[b].current
           new == nextLedger
           written == Len(ledger[cur].entries)
           closeOk == \/ ledger[cur].state = "open"
                      \/ ledger[cur].state = "closed" /\ ledger[cur].lastEntry = written
           ok == list.version = ml[b].version
       IN /\ written > 0                               \* an empty ledger is not rolled over
          /\ IF ~closeOk
             THEN /\ ml' = [ml EXCEPT ![b] = Fenced(ml[b])]
                  /\ UNCHANGED <<ledger, nextLedger, list>>
             ELSE /\ ledger' = [ledger EXCEPT ![cur].state = IF @ = "open" /\ Mutation # "rollover_leaves_open"
                                                               THEN "closed" ELSE @,
                                              ![cur].lastEntry = IF ledger[cur].state = "open"
                                                                 THEN written ELSE @,
                                              ![new].state = "open"]
                  /\ nextLedger' = nextLedger + 1
                  /\ IF ok
                     THEN /\ list' = [version |-> list.version + 1, ledgers |-> Append(ml[b].ledgers, new)]
                          /\ ml' = [ml EXCEPT ![b].version = list.version + 1,
                                              ![b].ledgers = Append(ml[b].ledgers, new), ![b].current = new]
                     ELSE /\ UNCHANGED list
                          /\ IF FenceOnBadVersion
                             THEN ml' = [ml EXCEPT ![b] = Fenced(ml[b])]
                             ELSE ml' = [ml EXCEPT ![b].current = new]   \* BUG 17736: keeps writing
          /\ lastAction' = [name |-> "Rollover", params |-> [broker |-> b, from |-> cur, to |-> new,
                                                            expectedVersion |-> ml[b].version,
                                                            closeOk |-> closeOk, badVersion |-> ~ok]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, acked, nextMsg, lostAcks, consumed, trimmed>>

\* ---- Managed ledger: Pulsar's rollover in several steps (MultiStepRollover) ------------------

\* An add that arrives while a rollover is under way, or behind adds still queued, waits in the queue
\* (Pulsar's pendingAddEntries). The producer has published it (it may publish the next one meanwhile).
QueueAddEntry(b) ==
    /\ ml[b].state = "open"
    /\ ml[b].phase # "idle" \/ ml[b].queue # <<>>
    /\ nextMsg \in Messages
    /\ ml' = [ml EXCEPT ![b].queue = Append(@, nextMsg)]
    /\ nextMsg' = nextMsg + 1
    /\ lastAction' = [name |-> "QueueAddEntry", params |-> [broker |-> b, msg |-> nextMsg, phase |-> ml[b].phase]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, ledger, nextLedger, acked, lostAcks,
                   consumed, trimmed>>

\* Step 1: the writer close of the current ledger (Pulsar's ClosingLedger, then ClosedLedger). A ledger
\* someone already closed at another end cannot be closed: FENCED (as in Rollover).
RolloverCloseLedger(b) ==
    /\ MultiStepRollover
    /\ session[b] = "alive"
    /\ ml[b].state = "open" /\ ml[b].phase = "idle" /\ ml[b].queue = <<>>
    /\ LET cur == ml[b].current
           written == Len(ledger[cur].entries)
           closeOk == \/ ledger[cur].state = "open"
                      \/ ledger[cur].state = "closed" /\ ledger[cur].lastEntry = written
       IN /\ written > 0                               \* an empty ledger is not rolled over
          /\ IF closeOk
             THEN /\ ledger' = [ledger EXCEPT ![cur].state = IF @ = "open" THEN "closed" ELSE @,
                                              ![cur].lastEntry = IF ledger[cur].state = "open" THEN written ELSE @]
                  /\ ml' = [ml EXCEPT ![b].phase = "creating"]
             ELSE /\ ml' = [ml EXCEPT ![b] = Fenced(ml[b])]
                  /\ UNCHANGED ledger
          /\ lastAction' = [name |-> "RolloverCloseLedger", params |-> [broker |-> b, ledger |-> cur, closeOk |-> closeOk]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, nextLedger, acked, nextMsg, lostAcks,
                   consumed, trimmed>>

\* Step 2: create the next ledger (Pulsar's CreatingLedger); it becomes ml.current, not yet on the list.
RolloverCreateLedger(b) ==
    /\ MultiStepRollover
    /\ session[b] = "alive"
    /\ ml[b].state = "open" /\ ml[b].phase = "creating"
    /\ nextLedger \in LedgerIds
    /\ ledger' = [ledger EXCEPT ![nextLedger].state = "open"]
    /\ nextLedger' = nextLedger + 1
    /\ ml' = [ml EXCEPT ![b].phase = "writing", ![b].current = nextLedger]
    /\ lastAction' = [name |-> "RolloverCreateLedger", params |-> [broker |-> b, ledger |-> nextLedger]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, acked, nextMsg, lostAcks, consumed, trimmed>>

\* Step 3: conditional-write the list with the new ledger appended. Written: the rollover is done and
\* the queued adds go to the new ledger (WriteQueuedAdd). A bad version: FENCED, the queued adds fail,
\* and the managed ledger's current ledger is the old one again (the new one is an orphan).
RolloverWriteList(b) ==
    /\ MultiStepRollover
    /\ session[b] = "alive"
    /\ ml[b].state = "open" /\ ml[b].phase = "writing"
    /\ LET new == ml[b].current
           ok == list.version = ml[b].version
       IN /\ IF ok
             THEN /\ list' = [version |-> list.version + 1, ledgers |-> Append(ml[b].ledgers, new)]
                  /\ ml' = [ml EXCEPT ![b].version = list.version + 1, ![b].ledgers = Append(ml[b].ledgers, new),
                                      ![b].phase = "idle"]
             ELSE /\ UNCHANGED list
                  /\ IF FenceOnBadVersion
                     THEN ml' = [ml EXCEPT ![b] = [Fenced(ml[b]) EXCEPT !.current = Last(ml[b].ledgers)]]
                     ELSE ml' = [ml EXCEPT ![b].phase = "idle"]   \* BUG 17736: keeps writing to the new one
          /\ lastAction' = [name |-> "RolloverWriteList", params |-> [broker |-> b, ledger |-> new,
                                                                     expectedVersion |-> ml[b].version,
                                                                     queued |-> Len(ml[b].queue), badVersion |-> ~ok]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, ledger, nextLedger, acked, nextMsg, lostAcks,
                   consumed, trimmed>>

\* The first queued add is stored on the current ledger and acknowledged; refused (fenced or deleted):
\* FENCED, and every queued add fails. Only while Sending(b): after the list write (in the unsafe
\* variant also before it).
WriteQueuedAdd(b) ==
    /\ ml[b].state = "open" /\ ml[b].queue # <<>>
    /\ Sending(b)
    /\ LET l == ml[b].current
           m == Head(ml[b].queue)
           refused == ~Accepts(l)
       IN /\ IF refused
             THEN /\ ml' = [ml EXCEPT ![b] = Fenced(ml[b])]
                  /\ UNCHANGED <<ledger, acked>>
             ELSE /\ ledger' = [ledger EXCEPT ![l].entries = Append(@, m)]
                  /\ acked' = Append(acked, [msg |-> m, ledger |-> l, broker |-> b])
                  /\ ml' = [ml EXCEPT ![b].queue = Tail(@)]
          /\ lastAction' = [name |-> "WriteQueuedAdd", params |-> [broker |-> b, ledger |-> l, msg |-> m,
                                                                  fenced |-> refused]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, nextLedger, nextMsg, lostAcks, consumed,
                   trimmed>>

\* The subscription consumes the next entry of the topic's log (advances its mark-delete position).
Consume ==
    /\ consumed < trimmed + Len(TopicLog)
    /\ consumed' = consumed + 1
    /\ lastAction' = [name |-> "Consume", params |-> [position |-> consumed + 1]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, ledger, nextLedger, ml, acked, nextMsg, lostAcks,
                   trimmed>>

\* Trim: remove the first ledger of the list once closed and fully consumed (conditional write),
\* then delete it.  It races stale writers that may still hold it as their current ledger.
TrimConsumedLedger(b) ==
    /\ session[b] = "alive"
    /\ ml[b].state = "open" /\ ml[b].phase = "idle"     \* one change of the list at a time
    /\ Len(list.ledgers) >= 2
    /\ LET h == Head(ml[b].ledgers)
           ok == list.version = ml[b].version
       IN /\ Len(ml[b].ledgers) >= 2
          /\ ledger[h].state = "closed"
          /\ trimmed + ledger[h].lastEntry <= consumed \/ Mutation = "trims_unconsumed"
          /\ IF ok
             THEN /\ list' = [version |-> list.version + 1, ledgers |-> Tail(list.ledgers)]
                  /\ ml' = [ml EXCEPT ![b].version = list.version + 1, ![b].ledgers = Tail(list.ledgers)]
                  /\ ledger' = [ledger EXCEPT ![h] = [state |-> "deleted", entries |-> <<>>,
                                                      lastEntry |-> @.lastEntry, fenced |-> @.fenced]]
                  /\ trimmed' = trimmed + ledger[h].lastEntry
             ELSE /\ ml' = [ml EXCEPT ![b] = Fenced(ml[b])]
                  /\ UNCHANGED <<list, ledger, trimmed>>
          /\ lastAction' = [name |-> "TrimConsumedLedger", params |-> [broker |-> b, ledger |-> h,
                                                                      badVersion |-> ~ok]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, nextLedger, acked, nextMsg, lostAcks, consumed>>

\* A fenced managed ledger is closed with its topic; the broker may open it again if it still owns.
CloseFencedManagedLedger(b) ==
    /\ ml[b].state = "fenced"
    /\ Mutation # "fenced_stays"
    /\ ml' = [ml EXCEPT ![b] = Unloaded]
    /\ lastAction' = [name |-> "CloseFencedManagedLedger", params |-> [broker |-> b]]
    /\ UNCHANGED <<session, believesOwner, ownerNode, expiries, list, ledger, nextLedger, acked, nextMsg, lostAcks,
                   consumed, trimmed>>

Next ==
    \/ \E b \in Brokers :
        \/ ExpireSession(b) \/ Reconnect(b) \/ AcquireOwnership(b) \/ RevalidateOwnership(b)
        \/ ReadLedgerList(b) \/ RecoverLastLedger(b) \/ CreateLedgerAndWriteList(b)
        \/ AddEntry(b) \/ AddEntryAckLost(b) \/ Rollover(b) \/ TrimConsumedLedger(b) \/ CloseFencedManagedLedger(b)
        \/ QueueAddEntry(b) \/ RolloverCloseLedger(b) \/ RolloverCreateLedger(b) \/ RolloverWriteList(b)
        \/ WriteQueuedAdd(b)
    \/ Consume

Spec == Init /\ [][Next]_vars

\* Weak fairness on every broker step but the faults (ExpireSession) and the optional ones (Rollover and
\* RolloverCloseLedger, which starts a multi-step one; trimming; consumption): a broker that can go on
\* eventually does. Expiries are bounded (MaxExpiries), so they stop.
FairSpec ==
    /\ Spec
    /\ \A b \in Brokers :
        /\ WF_vars(Reconnect(b)) /\ WF_vars(AcquireOwnership(b)) /\ WF_vars(RevalidateOwnership(b))
        /\ WF_vars(ReadLedgerList(b)) /\ WF_vars(RecoverLastLedger(b)) /\ WF_vars(CreateLedgerAndWriteList(b))
        /\ WF_vars(AddEntry(b)) /\ WF_vars(CloseFencedManagedLedger(b))
        /\ WF_vars(QueueAddEntry(b)) /\ WF_vars(RolloverCreateLedger(b)) /\ WF_vars(RolloverWriteList(b))
        /\ WF_vars(WriteQueuedAdd(b))

-----------------------------------------------------------------------------
\* ---- Invariants ----

TypeOK ==
    /\ session \in [Brokers -> {"alive", "expired"}]
    /\ believesOwner \in [Brokers -> BOOLEAN]
    /\ ownerNode \in Brokers \cup {NoBroker}
    /\ list.version \in Nat /\ Range(list.ledgers) \subseteq LedgerIds
    /\ \A l \in LedgerIds : /\ ledger[l].state \in LedgerStates
                            /\ Range(ledger[l].entries) \subseteq Messages
                            /\ ledger[l].fenced \in BOOLEAN
    /\ \A b \in Brokers : /\ ml[b].state \in MLStates /\ ml[b].current \in LedgerIds \cup {NoLedger}
                          /\ ml[b].phase \in Phases /\ Range(ml[b].queue) \subseteq Messages
    /\ consumed \in Nat /\ trimmed \in 0..consumed /\ lostAcks \in 0..MaxLostAcks

\* A broker's add can still be acknowledged: its managed ledger is open and sends adds to a ledger whose
\* bookies would accept them.
CanAck(b) ==
    /\ ml[b].state = "open"
    /\ Sending(b)
    /\ Accepts(ml[b].current)

\* At most one broker's writes can still be acknowledged on the topic, at any time: once a
\* takeover completed, the previous owner can no longer get an add acknowledged.
SingleWriter == Cardinality({b \in Brokers : CanAck(b)}) <= 1

\* What Pulsar promises a producer: every acknowledged message that was not trimmed is in a ledger on
\* the list, and a reader of the list sees each of them exactly once, in the order they were
\* acknowledged; the trimmed ones are the first acknowledged. The log may hold more: messages whose
\* acknowledgement was lost (AddEntryAckLost), which a recovery kept; nothing that was not published.
Positions(m) == {p \in 1..Len(TopicLog) : TopicLog[p] = m}
AckedTrimmed(i) == ledger[acked[i].ledger].state = "deleted"
AckedMessagesOnList ==
    LET kept == {i \in 1..Len(acked) : ~AckedTrimmed(i)} IN
    /\ \A i \in kept : Cardinality(Positions(acked[i].msg)) = 1
    /\ \A i, j \in kept : i < j => \A p \in Positions(acked[i].msg), q \in Positions(acked[j].msg) : p < q
    /\ \A i \in kept, j \in 1..Len(acked) : AckedTrimmed(j) => j < i
    /\ \A p \in 1..Len(TopicLog) : TopicLog[p] < nextMsg

\* At most one ledger on the list is open, and only the last one can be.
AtMostOneOpenLedger ==
    \A i \in 1..Len(list.ledgers) :
        ledger[list.ledgers[i]].state = "open" => i = Len(list.ledgers)

\* A ledger on the list is never deleted.
NoDeletedLedgerOnList == \A l \in Range(list.ledgers) : ledger[l].state # "deleted"

\* Nothing is stored on a deleted ledger (deletion empties it): no add, acknowledged or not, lands where
\* no reader of the list will ever look.
NothingStoredOnDeletedLedger == \A l \in LedgerIds : ledger[l].state = "deleted" => ledger[l].entries = <<>>

\* ---- Properties of behaviours ----

\* The list only grows at its end, except by trimming a closed, fully consumed head; its version
\* goes up by one with every change.
ListGrowsOnlyAtEnd ==
    [][ /\ list'.version = list.version + 1
        /\ \/ \E l \in LedgerIds : list'.ledgers = Append(list.ledgers, l)
           \/ /\ list.ledgers # <<>>                            \* an empty last ledger replaced
              /\ ledger[Last(list.ledgers)].state = "closed" /\ ledger[Last(list.ledgers)].lastEntry = 0
              /\ \E l \in LedgerIds : list'.ledgers = Append(SubSeq(list.ledgers, 1, Len(list.ledgers) - 1), l)
           \/ /\ list.ledgers # <<>>
              /\ list'.ledgers = Tail(list.ledgers)
              /\ ledger[Head(list.ledgers)].state = "closed"
              /\ trimmed + ledger[Head(list.ledgers)].lastEntry <= consumed
      ]_list

\* A closed ledger never changes its end, and never reopens.
ClosedLedgerNeverChanges ==
    [][\A l \in LedgerIds : ledger[l].state = "closed" =>
                             /\ ledger'[l].state \in {"closed", "deleted"}
                             /\ ledger'[l].lastEntry = ledger[l].lastEntry]_ledger
\* ---- Liveness (under FairSpec) ----

\* Once session expiries stop, the topic makes progress: every message is eventually acknowledged by
\* some broker. Ledger ids are bounded in a model, and a stale broker that reconnected may open the
\* topic (fencing the owner's ledger, using ids) before it revalidates its ownership and unloads; a
\* behaviour that used up every id stops there, which the property allows (spec/fencing.md).
EveryMessageAcknowledged == <>(nextMsg > MaxMessages \/ nextLedger > MaxLedgers)

\* ---- Witnesses: negations of situations the passing model must reach (each a model
\* expected to FAIL), so that a passing check is not passing vacuously. ----

\* An old owner's add failed as fenced and its managed ledger went FENCED.
WitnessNoFencedAdd == \A b \in Brokers : ~(ml[b].state = "fenced" /\ ledger[ml[b].current].fenced)

\* A closed ledger on the list holds a message that was never acknowledged (its add was stored, the
\* ack lost, and a recovery kept it): readers see it for good.
WitnessNoUnacknowledgedInLog ==
    \A l \in Range(list.ledgers) :
        ledger[l].state = "closed" => \A m \in Range(Visible(l)) : \E i \in 1..Len(acked) : acked[i].msg = m

\* Ledger deletion raced a stale writer: a broker is open on a ledger someone trimmed and deleted.
WitnessNoWriterOnDeletedLedger ==
    \A b \in Brokers : ml[b].state = "open" => ledger[ml[b].current].state # "deleted"

\* (MultiStepRollover, MaxLostAcks = 0) A rollover's list write met a takeover while adds were queued: the
\* managed ledger is FENCED with a current ledger (FENCED at open it has none), a ledger is an orphan (open, on
\* no list, nobody's current), and a published message was given up: neither stored, nor acknowledged, nor
\* queued (only a queued add that failed is).
WitnessNoQueuedAddLostToListWrite ==
    ~ \E b \in Brokers :
        /\ ml[b].state = "fenced" /\ ml[b].current # NoLedger
        /\ \E l \in LedgerIds : /\ ledger[l].state = "open" /\ l \notin Range(list.ledgers)
                               /\ \A c \in Brokers : ml[c].state = "fenced" \/ ml[c].current # l
        /\ \E m \in 1..(nextMsg - 1) : /\ \A i \in 1..Len(acked) : acked[i].msg # m
                                      /\ \A l \in LedgerIds : m \notin Range(ledger[l].entries)
                                      /\ \A c \in Brokers : m \notin Range(ml[c].queue)
=============================================================================
