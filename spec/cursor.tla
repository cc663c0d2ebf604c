------------------------------- MODULE cursor -------------------------------
(***************************************************************************)
(* The durable cursor of one subscription (issue 24, item 5), as Pulsar's  *)
(* ManagedCursorImpl keeps it and impl/broker/cursor_core.py               *)
(* (`ManagedCursorCore`) implements it, with every acknowledgement written *)
(* through (cursor_persist_interval_s = 0).                                *)
(*                                                                         *)
(* The topic holds messages 1..MaxMsgs (published before; the managed     *)
(* ledger is fencing.tla's subject).  The cursor's mark-delete position md *)
(* means "messages 1..md are acknowledged".  It is persisted in two        *)
(* places:                                                                 *)
(*  - the cursor ledger: a BookKeeper ledger (atomic here, as in           *)
(*    fencing.tla: an append is stored or refused, a recovery fences it    *)
(*    and reads its last entry) to which the owner appends every new       *)
(*    mark-delete;                                                         *)
(*  - the cursor's metadata node [ledger, md, version]: which cursor ledger*)
(*    is current, and the mark-delete when the node was written; changed  *)
(*    only by conditional write (the version read).                        *)
(*                                                                         *)
(* Switching cursor ledgers (on open, and after MaxEntries states in one   *)
(* ledger): create a ledger whose first entry is the state, write the node *)
(* naming it, then delete the old ledger.  Ownership: the broker holding   *)
(* the topic's ephemeral ownership node opens the cursor: it reads the     *)
(* node, recovers (fences) the cursor ledger the node names and takes its *)
(* last entry (or the node's state if that ledger is gone), and switches   *)
(* to a new ledger.  A session can expire without its broker knowing: the  *)
(* old owner keeps its cursor open, delivers and takes acknowledgements,   *)
(* and tries to write them, until its cursor ledger is found fenced or a   *)
(* node write finds another version (then its cursor is FENCED).           *)
(*                                                                         *)
(* One consumer: it acknowledges (cumulatively) messages a broker delivered*)
(* to it; `acked` is its highest acknowledgement, sent to whichever broker.*)
(*                                                                         *)
(* LostNodeAnswers (issue 24 item 3): a node write's answer can be lost    *)
(* (a connection loss): it applied or not, the broker does not know.  A    *)
(* switch then stops the cursor and deletes neither ledger: the node names *)
(* one of them, and each holds the newest state.                           *)
(*                                                                         *)
(* Mutations (CONSTANT switches, so the text shows where each bug lives):  *)
(* NoRecovery (a new owner neither fences nor reads the cursor ledger: it  *)
(* takes the node's state), PersistOnDelivery (a mark-delete is persisted  *)
(* when the message is delivered, before the consumer acknowledges it),    *)
(* BlindNodeWrite (the node is written without the expected version),     *)
(* DeleteAfterLostAnswer (with LostNodeAnswers, the failure of issue 24    *)
(* item 3: a switch whose node write has an unknown outcome deletes the   *)
(* new cursor ledger and keeps writing to the old one).                    *)
(* Every action sets `lastAction` (outside the VIEW) for conformance/.     *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Brokers,            \* the brokers that can own the topic (model values)
    MaxMsgs,            \* the topic's messages 1..MaxMsgs
    MaxEntries,         \* cursor_max_entries: states appended to one cursor ledger before a switch
    MaxLedgers,         \* cursor ledgers in all (ledger 1 exists at the start)
    MaxExpiries,        \* session expiries of the owner
    NoRecovery,         \* mutation: a new owner does not fence and read the cursor ledger
    PersistOnDelivery,  \* mutation: the mark-delete is persisted at delivery, before the acknowledgement
    BlindNodeWrite,     \* mutation: the cursor node is written without the expected version
    LostNodeAnswers,    \* a node write's answer can be lost (connection loss): applied or not, unknown
    DeleteAfterLostAnswer \* mutation: after a lost answer a switch deletes the new ledger, keeps the old

ASSUME /\ {MaxMsgs, MaxEntries, MaxLedgers, MaxExpiries} \subseteq Nat /\ MaxEntries >= 1 /\ MaxLedgers >= 1
       /\ NoRecovery \in BOOLEAN /\ PersistOnDelivery \in BOOLEAN /\ BlindNodeWrite \in BOOLEAN
       /\ LostNodeAnswers \in BOOLEAN /\ DeleteAfterLostAnswer \in BOOLEAN

None == "none"
NoSwitch == [old |-> 0, new |-> 0, md |-> 0]
\* Issue 47 (overridden in a mutation model's CONSTANTS): "pump_drops_queued" (with no I/O in flight the
\* queued acknowledgement is never written: accepted, it never takes effect), "open_skips_one" (an open
\* cursor reads from one past its recovered mark-delete: a message never redelivered).
Mutation == "none"

VARIABLES
    owner,      \* the broker holding the topic's ephemeral ownership node, or None
    expiries,   \* session expiries so far
    node,       \* the cursor's metadata node: [ledger, md, version]
    ledgers,    \* the cursor ledgers (id = index): [entries : Seq(md), fenced, deleted]
    acked,      \* the consumer's highest (cumulative) acknowledgement
    status,     \* [Brokers -> {"closed", "opening", "open", "fenced"}]: each broker's cursor
    io,         \* [Brokers -> {"idle", "recover", "create", "node", "append"}]: its one I/O in flight
    md,         \* [Brokers -> 0..MaxMsgs]: its mark-delete in effect (written, or recovered)
    writing,    \* [Brokers -> 0..MaxMsgs]: the mark-delete being appended (io = "append"; else 0)
    candidate,  \* [Brokers -> -1..MaxMsgs]: an acknowledgement waiting for the I/O in flight (-1: none)
    curLedger,  \* [Brokers -> 0..MaxLedgers]: the cursor ledger it appends to (0: none yet)
    nEntries,   \* [Brokers -> Nat]: states appended to curLedger
    version,    \* [Brokers -> Int]: the node version it read or wrote (its next conditional write's)
    switch,     \* [Brokers -> [old, new, md]]: its switch of cursor ledgers (old = 0: none)
    readPos,    \* [Brokers -> 0..MaxMsgs]: its dispatcher: messages up to readPos were delivered
    lastAction  \* auxiliary, for conformance: [name, params] of the last action (not in the VIEW)

vars == <<owner, expiries, node, ledgers, acked, status, io, md, writing, candidate, curLedger, nEntries,
          version, switch, readPos, lastAction>>
view == <<owner, expiries, node, ledgers, acked, status, io, md, writing, candidate, curLedger, nEntries,
          version, switch, readPos>>

-----------------------------------------------------------------------------
Init ==
    /\ owner = None
    /\ expiries = 0
    /\ node = [ledger |-> 1, md |-> 0, version |-> 0]
    /\ ledgers = <<[entries |-> <<0>>, fenced |-> FALSE, deleted |-> FALSE]>>
    /\ acked = 0
    /\ status = [b \in Brokers |-> "closed"]
    /\ io = [b \in Brokers |-> "idle"]
    /\ md = [b \in Brokers |-> 0]
    /\ writing = [b \in Brokers |-> 0]
    /\ candidate = [b \in Brokers |-> -1]
    /\ curLedger = [b \in Brokers |-> 0]
    /\ nEntries = [b \in Brokers |-> 0]
    /\ version = [b \in Brokers |-> 0]
    /\ switch = [b \in Brokers |-> NoSwitch]
    /\ readPos = [b \in Brokers |-> 0]
    /\ lastAction = [name |-> "Init", params |-> [none |-> 0]]

Max(a, c) == IF a >= c THEN a ELSE c
Last(s) == s[Len(s)]

\* The state a change builds on (ManagedCursorCore._newest): queued, else being written, else in effect.
Newest(b) == IF candidate[b] >= 0 THEN candidate[b] ELSE IF io[b] = "append" THEN writing[b] ELSE md[b]

\* What a new owner would recover now: the last entry of the ledger the node names, or the node's
\* state if that ledger is gone.
Recoverable == IF ledgers[node.ledger].deleted THEN node.md ELSE Last(ledgers[node.ledger].entries)

\* With no I/O in flight: start appending the queued acknowledgement, if there is one
\* (ManagedCursorCore._pump). `b` is open and has a cursor ledger.
Pump(b) ==
    IF candidate[b] >= 0 /\ Mutation # "pump_drops_queued"
    THEN /\ io' = [io EXCEPT ![b] = "append"]
         /\ writing' = [writing EXCEPT ![b] = candidate[b]]
         /\ candidate' = [candidate EXCEPT ![b] = -1]
    ELSE /\ io' = [io EXCEPT ![b] = "idle"]
         /\ writing' = [writing EXCEPT ![b] = 0]
         /\ UNCHANGED candidate

\* A change of b's mark-delete to m (a cumulative acknowledgement; m > Newest(b)): written through.
MarkDelete(b, m) ==
    IF io[b] = "idle"
    THEN /\ io' = [io EXCEPT ![b] = "append"]
         /\ writing' = [writing EXCEPT ![b] = m]
         /\ UNCHANGED candidate
    ELSE /\ candidate' = [candidate EXCEPT ![b] = m]
         /\ UNCHANGED <<io, writing>>

\* ---- Ownership ----

\* b acquires the free ownership node (or, owning it, opens again after a failed open) and opens the
\* cursor with a fresh core: it reads the node and asks to recover the ledger the node names.
OpenCursor(b) ==
    /\ owner \in {None, b}
    /\ status[b] \in {"closed", "fenced"}
    /\ owner' = b
    /\ status' = [status EXCEPT ![b] = "opening"]
    /\ io' = [io EXCEPT ![b] = "recover"]
    /\ md' = [md EXCEPT ![b] = node.md]
    /\ version' = [version EXCEPT ![b] = node.version]
    /\ switch' = [switch EXCEPT ![b] = [old |-> node.ledger, new |-> 0, md |-> node.md]]
    /\ writing' = [writing EXCEPT ![b] = 0]
    /\ candidate' = [candidate EXCEPT ![b] = -1]
    /\ curLedger' = [curLedger EXCEPT ![b] = 0]
    /\ nEntries' = [nEntries EXCEPT ![b] = 0]
    /\ readPos' = [readPos EXCEPT ![b] = 0]
    /\ lastAction' = [name |-> "OpenCursor", params |-> [broker |-> b, ledger |-> node.ledger, version |-> node.version]]
    /\ UNCHANGED <<expiries, node, ledgers, acked>>

\* The owner's session expires: its ownership node is deleted; the broker does not know (yet) and
\* its cursor goes on.
SessionExpires ==
    /\ owner # None
    /\ expiries < MaxExpiries
    /\ owner' = None
    /\ expiries' = expiries + 1
    /\ lastAction' = [name |-> "SessionExpires", params |-> [broker |-> owner]]
    /\ UNCHANGED <<node, ledgers, acked, status, io, md, writing, candidate, curLedger, nEntries, version,
                   switch, readPos>>

\* ---- Opening: recovery and the switch of cursor ledgers ----

\* Open the old cursor ledger with recovery: it is fenced (its writer can append no more) and its last
\* entry is the newest state. A ledger deleted meanwhile (a switch wrote the node) gives the node's state.
RecoverCursorLedger(b) ==
    /\ io[b] = "recover"
    /\ LET l == switch[b].old
           gone == ledgers[l].deleted
           \* mutation: the ledger is neither fenced nor read; the node's state is taken
           recover == ~gone /\ ~NoRecovery
           state == IF recover THEN Last(ledgers[l].entries) ELSE switch[b].md
       IN /\ ledgers' = IF recover THEN [ledgers EXCEPT ![l].fenced = TRUE] ELSE ledgers
          /\ md' = [md EXCEPT ![b] = state]
          /\ switch' = [switch EXCEPT ![b].md = state]
          /\ io' = [io EXCEPT ![b] = "create"]
          /\ lastAction' = [name |-> "RecoverCursorLedger", params |-> [broker |-> b, ledger |-> l, gone |-> gone,
                                                                         md |-> state]]
    /\ UNCHANGED <<owner, expiries, node, acked, status, writing, candidate, curLedger, nEntries, version, readPos>>

\* Create the next cursor ledger, its first entry the switch's state (nobody else knows the ledger:
\* creating it and appending its first entry are one step).
CreateCursorLedger(b) ==
    /\ io[b] = "create"
    /\ Len(ledgers) < MaxLedgers
    /\ LET l == Len(ledgers) + 1
       IN /\ ledgers' = Append(ledgers, [entries |-> <<switch[b].md>>, fenced |-> FALSE, deleted |-> FALSE])
          /\ switch' = [switch EXCEPT ![b].new = l]
          /\ io' = [io EXCEPT ![b] = "node"]
          /\ lastAction' = [name |-> "CreateCursorLedger", params |-> [broker |-> b, ledger |-> l, md |-> switch[b].md]]
    /\ UNCHANGED <<owner, expiries, node, acked, status, md, writing, candidate, curLedger, nEntries, version, readPos>>

\* The conditional write of the node naming the new ledger. Done: the old ledger is deleted, the new one
\* is current; an opening cursor is open, and delivery resumes after its mark-delete. Another version:
\* another broker took the cursor; the new ledger is deleted, an opening cursor closes (the open failed),
\* an open one is fenced. With LostNodeAnswers the answer can be lost (a connection loss): the write
\* applied or not, the broker does not know. An opening cursor's open fails (the new ledger is deleted:
\* if the node names it, its state is the node's, which a later open takes); a switch of an open cursor
\* stops the cursor (FENCED) and deletes nothing: the node names one of the two ledgers, and each holds
\* the newest state. Mutation DeleteAfterLostAnswer: the switch deletes the new ledger and goes on
\* writing to the old one, as if the write had not applied.
WriteCursorNode(b) ==
    /\ io[b] = "node"
    /\ LET s == switch[b]
           matches == node.version = version[b] \/ BlindNodeWrite  \* mutation: a write without the version
           opening == status[b] = "opening"
           \* <<applied, answer lost>>: an answer is lost after the write applied, or with the request
           outcomes == {<<matches, FALSE>>} \cup (IF LostNodeAnswers THEN {<<matches, TRUE>>, <<FALSE, TRUE>>} ELSE {})
       IN \E outcome \in outcomes :
          LET applied == outcome[1]
              lost == outcome[2]
          IN /\ node' = IF applied THEN [ledger |-> s.new, md |-> s.md, version |-> node.version + 1] ELSE node
             /\ switch' = [switch EXCEPT ![b] = NoSwitch]
             /\ lastAction' = [name |-> "WriteCursorNode", params |-> [broker |-> b, ledger |-> s.new,
                                                                       written |-> applied /\ ~lost,
                                                                       applied |-> applied, lost |-> lost]]
             /\ CASE ~lost /\ applied ->
                       /\ ledgers' = [ledgers EXCEPT ![s.old].deleted = TRUE]
                       /\ version' = [version EXCEPT ![b] = node.version + 1]
                       /\ curLedger' = [curLedger EXCEPT ![b] = s.new]
                       /\ nEntries' = [nEntries EXCEPT ![b] = 1]
                       /\ status' = [status EXCEPT ![b] = "open"]
                       /\ readPos' = IF opening
                                     THEN [readPos EXCEPT ![b] = IF Mutation = "open_skips_one" /\ s.md < MaxMsgs
                                                                 THEN s.md + 1 ELSE s.md]
                                     ELSE readPos
                       /\ Pump(b)
                       /\ UNCHANGED <<md>>
                  [] lost /\ ~opening /\ DeleteAfterLostAnswer ->
                       /\ ledgers' = [ledgers EXCEPT ![s.new].deleted = TRUE]
                       /\ Pump(b)
                       /\ UNCHANGED <<status, version, curLedger, nEntries, readPos, md>>
                  [] lost /\ ~opening ->
                       /\ status' = [status EXCEPT ![b] = "fenced"]
                       /\ io' = [io EXCEPT ![b] = "idle"]
                       /\ candidate' = [candidate EXCEPT ![b] = -1]
                       /\ UNCHANGED <<ledgers, version, curLedger, nEntries, readPos, md, writing>>
                  [] OTHER ->  \* another version, or a lost answer while opening
                       /\ ledgers' = [ledgers EXCEPT ![s.new].deleted = TRUE]
                       /\ status' = [status EXCEPT ![b] = IF opening THEN "closed" ELSE "fenced"]
                       /\ io' = [io EXCEPT ![b] = "idle"]
                       /\ candidate' = [candidate EXCEPT ![b] = -1]
                       /\ UNCHANGED <<version, curLedger, nEntries, readPos, md, writing>>
    /\ UNCHANGED <<owner, expiries, acked>>

\* ---- The open cursor ----

\* The dispatcher delivers the next message to the consumer.
Deliver(b) ==
    /\ status[b] = "open"
    /\ readPos[b] < MaxMsgs
    /\ readPos' = [readPos EXCEPT ![b] = @ + 1]
    /\ IF PersistOnDelivery  \* mutation: marked deleted when delivered, before any acknowledgement
       THEN MarkDelete(b, readPos[b] + 1)
       ELSE UNCHANGED <<io, writing, candidate>>
    /\ lastAction' = [name |-> "Deliver", params |-> [broker |-> b, msg |-> readPos[b] + 1]]
    /\ UNCHANGED <<owner, expiries, node, ledgers, acked, status, md, curLedger, nEntries, version, switch>>

\* The consumer acknowledges (cumulatively) message m, which b delivered, to b: written through.
Acknowledge(b, m) ==
    /\ status[b] = "open"
    /\ m > Newest(b) /\ m <= readPos[b]
    /\ acked' = Max(acked, m)
    /\ MarkDelete(b, m)
    /\ lastAction' = [name |-> "Acknowledge", params |-> [broker |-> b, msg |-> m]]
    /\ UNCHANGED <<owner, expiries, node, ledgers, status, md, curLedger, nEntries, version, switch, readPos>>

\* The append of the mark-delete to the cursor ledger. Stored: it is in effect (the acknowledgements
\* complete), and after MaxEntries states the cursor switches ledgers, else the queued one is written.
\* Fenced (another broker recovered the cursor): the cursor is FENCED, nothing is written again.
AppendCursorState(b) ==
    /\ io[b] = "append"
    /\ LET l == curLedger[b]
           fenced == ledgers[l].fenced
       IN /\ IF fenced
             THEN /\ status' = [status EXCEPT ![b] = "fenced"]
                  /\ io' = [io EXCEPT ![b] = "idle"]
                  /\ writing' = [writing EXCEPT ![b] = 0]
                  /\ candidate' = [candidate EXCEPT ![b] = -1]
                  /\ UNCHANGED <<ledgers, md, nEntries, switch>>
             ELSE /\ ledgers' = [ledgers EXCEPT ![l].entries = Append(@, writing[b])]
                  /\ md' = [md EXCEPT ![b] = writing[b]]
                  /\ nEntries' = [nEntries EXCEPT ![b] = @ + 1]
                  /\ IF nEntries[b] + 1 >= MaxEntries
                     THEN /\ io' = [io EXCEPT ![b] = "create"]
                          /\ writing' = [writing EXCEPT ![b] = 0]
                          /\ switch' = [switch EXCEPT ![b] = [old |-> l, new |-> 0, md |-> writing[b]]]
                          /\ UNCHANGED <<candidate, status>>
                     ELSE /\ Pump(b)
                          /\ UNCHANGED <<switch, status>>
          /\ lastAction' = [name |-> "AppendCursorState", params |-> [broker |-> b, ledger |-> l, md |-> writing[b],
                                                                       fenced |-> fenced]]
    /\ UNCHANGED <<owner, expiries, node, acked, curLedger, version, readPos>>

Next ==
    \/ SessionExpires
    \/ \E b \in Brokers :
        \/ OpenCursor(b) \/ RecoverCursorLedger(b) \/ CreateCursorLedger(b) \/ WriteCursorNode(b)
        \/ Deliver(b) \/ AppendCursorState(b)
        \/ \E m \in 1..MaxMsgs : Acknowledge(b, m)

Spec == Init /\ [][Next]_vars

\* The cursor's own I/O makes progress (weak fairness on its ledger and node steps); the consumer, the
\* deliveries, the opens and the expiries need none (expiries are bounded).
FairSpec ==
    /\ Spec
    /\ \A b \in Brokers : /\ WF_vars(RecoverCursorLedger(b)) /\ WF_vars(CreateCursorLedger(b))
                          /\ WF_vars(WriteCursorNode(b)) /\ WF_vars(AppendCursorState(b))

-----------------------------------------------------------------------------
\* ---- Invariants and properties ----

Ledger == [entries : Seq(0..MaxMsgs), fenced : BOOLEAN, deleted : BOOLEAN]

TypeOK ==
    /\ owner \in Brokers \cup {None}
    /\ expiries \in 0..MaxExpiries
    /\ node \in [ledger : 1..Len(ledgers), md : 0..MaxMsgs, version : Nat]
    /\ Len(ledgers) \in 1..MaxLedgers /\ \A l \in 1..Len(ledgers) : ledgers[l] \in Ledger /\ ledgers[l].entries # <<>>
    /\ acked \in 0..MaxMsgs
    /\ status \in [Brokers -> {"closed", "opening", "open", "fenced"}]
    /\ io \in [Brokers -> {"idle", "recover", "create", "node", "append"}]
    /\ md \in [Brokers -> 0..MaxMsgs] /\ writing \in [Brokers -> 0..MaxMsgs] /\ candidate \in [Brokers -> -1..MaxMsgs]
    /\ curLedger \in [Brokers -> 0..MaxLedgers] /\ nEntries \in [Brokers -> Nat]
    /\ readPos \in [Brokers -> 0..MaxMsgs]
    /\ \A b \in Brokers : /\ status[b] = "open" => curLedger[b] >= 1
                          /\ io[b] = "append" => status[b] = "open"

\* No message is skipped: nothing persisted (the node, any cursor ledger's entry) and no mark-delete
\* in effect marks a message deleted that the consumer has not acknowledged.
NoSkip ==
    /\ node.md <= acked
    /\ \A l \in 1..Len(ledgers) : \A i \in 1..Len(ledgers[l].entries) : ledgers[l].entries[i] <= acked
    /\ \A b \in Brokers : md[b] <= acked

\* Written through, an acknowledgement completes once persisted: every broker's mark-delete in effect
\* (written by it, or recovered) is at or before what a new owner would recover now.
CompletedAcksRecoverable == \A b \in Brokers : md[b] <= Recoverable

\* The persisted mark-delete (what a new owner recovers) never moves back, whichever broker writes.
MarkDeleteNeverMovesBack == [][Recoverable' >= Recoverable]_vars

\* At-least-once: when a cursor opens (a takeover), delivery resumes right after its mark-delete, which
\* is at or before the last persisted one and at or before the consumer's last acknowledgement (every
\* message not acknowledged is delivered again).
AtLeastOnce ==
    [][\A b \in Brokers : (status[b] = "opening" /\ status'[b] = "open") =>
                            /\ readPos'[b] = md'[b]
                            /\ md'[b] <= Recoverable
                            /\ md'[b] <= acked]_vars

\* Reachability witness (its model expects TLC to violate it): an old owner's append is refused
\* because a new owner fenced its cursor ledger.
WitnessNoFencedAppend == ~(lastAction.name = "AppendCursorState" /\ lastAction.params.fenced)

\* Liveness (issue 47, under FairSpec): an acknowledgement the open cursor accepted takes effect (its
\* mark-delete reaches it), unless the broker stops being the cursor's open owner (fenced, or closed),
\* or the model's cursor ledgers ran out (the bound's escape, not the protocol's: a switch of cursor
\* ledgers then waits for ever to create one). Stated over the mark-delete in effect (md), not over the
\* queue that accepted it.
AcceptedAcksTakeEffect ==
    \A b \in Brokers : \A m \in 1..MaxMsgs :
        (status[b] = "open" /\ Newest(b) >= m) ~> (md[b] >= m \/ status[b] # "open" \/ Len(ledgers) >= MaxLedgers)
=============================================================================
