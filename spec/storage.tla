------------------------------- MODULE storage -------------------------------
(***************************************************************************)
(* A topic's storage over its life (issue 45): offload to tiered storage,  *)
(* trimming under cursors and retention, and compaction, while ownership   *)
(* moves between brokers and conditional writes fail.                      *)
(*                                                                         *)
(* The topic is NumLedgers closed ledgers of one entry each (ledger i holds*)
(* entry i, whose key is Key(i): keys 1..NumKeys in turn); the entries in  *)
(* Deletes have an empty payload, which deletes their key from the         *)
(* compacted view (Pulsar's null value); writing is fencing.tla's business.*)
(* Two metadata nodes are written by conditional write (compare the        *)
(* version): the managed-ledger node `ml` (the list of ledgers and, per    *)
(* ledger, the uid of its offloaded copy: Pulsar's LedgerInfo offload      *)
(* context) and the compaction cursor's node `cnode` (its mark-delete is   *)
(* the compaction horizon and its property the compacted ledger, one write *)
(* as in Pulsar).  A broker acts on its own view (`known`) of both nodes,  *)
(* loaded when it takes the topic over; an old owner goes on acting on     *)
(* its stale view                                                          *)
(* until one of its writes fails.  Each broker runs one operation at a     *)
(* time (trim, offload or compaction), as the pure core does.              *)
(*                                                                         *)
(*  - Offload: upload the ledger to the tiered store under the broker's    *)
(*    uid, record the uid in `ml` (conditional write), and only then,      *)
(*    after the deletion lag, delete the bookie copy.                      *)
(*  - Trim: remove from `ml` the head ledgers every cursor (the            *)
(*    subscription and the compaction cursor) consumed and retention no    *)
(*    longer keeps (the last Retain ledgers are kept), then delete them.   *)
(*  - Compaction: read the previous compacted ledger and the entries after *)
(*    its horizon, write a new compacted ledger (last value per key), swap *)
(*    it into `cnode` by conditional write, then delete the previous one.  *)
(*                                                                         *)
(* A write's answer is ok or bad version; a lost answer (MaxFaults) leaves *)
(* the broker not knowing whether it applied.  Any failure fences the      *)
(* broker (its view is dropped until it takes the topic over again); it    *)
(* deletes what it wrote only when it knows the write did not apply.       *)
(* Mutation (one CONSTANT, so the text shows where each bug lives):        *)
(*   "delete_before_recorded"  the bookie copy is deleted once uploaded,   *)
(*                             before the offload is recorded              *)
(*   "trim_on_bad_version"     a trim deletes its ledgers although its     *)
(*                             conditional write failed                    *)
(*   "swap_without_cas"        the compacted ledger is swapped by a blind  *)
(*                             write                                       *)
(*   "record_before_uploaded"  the offload is recorded before the upload   *)
(*                             completed                                   *)
(*   "keep_deleted"            compaction drops the empty payloads but     *)
(*                             keeps the values they deleted               *)
(* Every action sets `lastAction` (outside the VIEW) for conformance/.     *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Brokers,          \* brokers that can own the topic (model values)
    NumLedgers,       \* closed ledgers 1..NumLedgers, one entry each
    NumKeys,          \* entry i has the key Key(i) = ((i - 1) % NumKeys) + 1
    Deletes,          \* the entries with an empty payload: each deletes its key (a tombstone)
    Retain,           \* retention: the last Retain ledgers are kept even when consumed
    MaxMoves,         \* ownership changes
    MaxFaults,        \* conditional writes whose answer is lost
    MaxCompactions,   \* compacted ledgers created (ids 1..MaxCompactions)
    Mutation          \* "none" or one of the mutations above

Mutations == {"none", "delete_before_recorded", "trim_on_bad_version", "swap_without_cas",
              "record_before_uploaded", "keep_deleted"}

ASSUME /\ NumLedgers \in Nat /\ NumKeys \in Nat \ {0} /\ Retain \in 0..NumLedgers /\ Deletes \subseteq 1..NumLedgers
       /\ {MaxMoves, MaxFaults, MaxCompactions} \subseteq Nat /\ Mutation \in Mutations

Ledgers == 1..NumLedgers
Key(i) == ((i - 1) % NumKeys) + 1
NoUid == "none"                 \* a ledger not offloaded
NotLoaded == [loaded |-> FALSE]  \* a broker that does not own the topic, or is fenced
Idle == [kind |-> "none"]

VARIABLES
    ml,          \* the managed-ledger node: [version, ledgers (on the list), offloaded: Ledgers -> uid]
    cnode,       \* the compaction cursor's node: [version, ledger (0: none yet), horizon]
    sub,         \* the subscription's persisted mark-delete: entries 1..sub are consumed
    bookies,     \* ledgers whose bookie copy exists
    tiered,      \* [Ledgers \X Brokers -> {"none", "partial", "complete"}]: offloaded objects by uid
    cdata,       \* [1..MaxCompactions -> SUBSET Ledgers]: each compacted ledger's entries
    cexists,     \* compacted ledgers that exist (created and not deleted)
    ncomp,       \* compacted ledgers created so far
    owner,       \* the broker the topic is assigned to
    known,        \* [Brokers -> NotLoaded or [loaded, version, ledgers, offloaded, cversion, cledger, chorizon]]
    op,          \* [Brokers -> Idle, [kind "offload", ledger, stage], [kind "compact", ledger, horizon, prev]]
    moves,       \* ownership changes so far
    faults,      \* lost answers so far
    lastAction   \* auxiliary, for conformance: [name, params] (not in the VIEW)

vars == <<ml, cnode, sub, bookies, tiered, cdata, cexists, ncomp, owner, known, op, moves, faults, lastAction>>
view == <<ml, cnode, sub, bookies, tiered, cdata, cexists, ncomp, owner, known, op, moves, faults>>

Load == [loaded |-> TRUE, version |-> ml.version, ledgers |-> ml.ledgers, offloaded |-> ml.offloaded,
         cversion |-> cnode.version, cledger |-> cnode.ledger, chorizon |-> cnode.horizon]

Init ==
    /\ ml = [version |-> 1, ledgers |-> Ledgers, offloaded |-> [l \in Ledgers |-> NoUid]]
    /\ cnode = [version |-> 1, ledger |-> 0, horizon |-> 0]
    /\ sub = 0
    /\ bookies = Ledgers
    /\ tiered = [x \in Ledgers \X Brokers |-> "none"]
    /\ cdata = [c \in 1..MaxCompactions |-> {}]
    /\ cexists = {}
    /\ ncomp = 0
    /\ owner = CHOOSE b \in Brokers : TRUE
    /\ known = [b \in Brokers |-> IF b = owner THEN
                  [loaded |-> TRUE, version |-> 1, ledgers |-> Ledgers, offloaded |-> [l \in Ledgers |-> NoUid],
                   cversion |-> 1, cledger |-> 0, chorizon |-> 0]
                ELSE NotLoaded]
    /\ op = [b \in Brokers |-> Idle]
    /\ moves = 0
    /\ faults = 0
    /\ lastAction = [name |-> "Init", params |-> [none |-> 0]]

-----------------------------------------------------------------------------
\* ---- What a reader gets ----

\* Reading ledger l through the list: from the offloaded object the list records, else from the bookies.
Read(l) ==
    IF ml.offloaded[l] # NoUid
    THEN CASE tiered[<<l, ml.offloaded[l]>>] = "complete" -> "data"
           [] tiered[<<l, ml.offloaded[l]>>] = "partial" -> "partial"
           [] OTHER -> "missing"
    ELSE IF l \in bookies THEN "data" ELSE "missing"

\* The last entry per key among the entries S.
LastPerKey(S) == {i \in S : ~\E j \in S : j > i /\ Key(j) = Key(i)}

\* What a compacted ledger keeps of S: the last entry of each key, unless it deletes the key.
Live(S) == LastPerKey(S) \ Deletes

\* What a compaction writes (the mutation: the empty payloads dropped first, the values they deleted kept).
Compacted(S) == IF Mutation = "keep_deleted" THEN LastPerKey(S \ Deletes) ELSE Live(S)

\* What holds data back: the subscription, the compaction cursor and the retention (last Retain ledgers).
Consumed(l) == l <= sub /\ l <= cnode.horizon
Retained(l) == l > NumLedgers - Retain
Needed(l) == ~Consumed(l) \/ Retained(l)

\* The write outcomes a broker can see: ok or bad version, and, while faults remain, a lost answer
\* (the write applied or not: the broker cannot tell).
Outcomes(matches) ==
    (IF matches THEN {"ok"} ELSE {"badversion"})
    \cup (IF faults < MaxFaults THEN (IF matches THEN {"lost_applied", "lost_not_applied"}
                                                 ELSE {"lost_not_applied"})
          ELSE {})
Applied(o) == o \in {"ok", "lost_applied"}
Fault(o) == IF o \in {"lost_applied", "lost_not_applied"} THEN faults + 1 ELSE faults

-----------------------------------------------------------------------------
\* ---- Ownership and the subscription ----

\* The topic moves to b (an unload, or the owner's session expired): b's takeover writes the list
\* (fencing.tla's CreateLedgerAndWriteList: version + 1) and b loads both nodes. The old owner keeps its
\* stale known and its operation until a write fails.
Acquire(b) ==
    /\ moves < MaxMoves
    /\ b # owner
    /\ moves' = moves + 1
    /\ owner' = b
    /\ ml' = [ml EXCEPT !.version = @ + 1]
    /\ known' = [known EXCEPT ![b] = [Load EXCEPT !.version = ml.version + 1]]
    /\ op' = [op EXCEPT ![b] = Idle]
    /\ lastAction' = [name |-> "Acquire", params |-> [broker |-> b]]
    /\ UNCHANGED <<cnode, sub, bookies, tiered, cdata, cexists, ncomp, faults>>

\* The subscription acknowledges the next entry (persisted; cursor.tla models how).
Ack ==
    /\ sub < NumLedgers
    /\ sub' = sub + 1
    /\ lastAction' = [name |-> "Ack", params |-> [position |-> sub + 1]]
    /\ UNCHANGED <<ml, cnode, bookies, tiered, cdata, cexists, ncomp, owner, known, op, moves, faults>>

-----------------------------------------------------------------------------
\* ---- Trim ----

\* Remove the head ledgers every cursor consumed and retention no longer keeps (as the broker's list
\* says), by conditional write; delete them once it applied: the bookie copy and the object the list
\* records (the objects of failed attempts are left: leaks).
Trim(b) ==
    /\ known[b].loaded /\ op[b] = Idle
    /\ LET v == known[b]
           T == {l \in v.ledgers : Consumed(l) /\ ~Retained(l)}
           matches == v.version = ml.version
       IN /\ T # {}
          /\ \E o \in Outcomes(matches) :
              LET newMl == [ml EXCEPT !.version = @ + 1, !.ledgers = @ \ T,
                                      !.offloaded = [l \in Ledgers |-> IF l \in T THEN NoUid ELSE @[l]]]
                  delete == o = "ok" \/ Mutation = "trim_on_bad_version"  \* mutation: deleted whatever the answer
              IN /\ ml' = IF Applied(o) THEN newMl ELSE ml
                 /\ known' = [known EXCEPT ![b] = IF o = "ok" THEN [v EXCEPT !.version = newMl.version,
                                                                          !.ledgers = newMl.ledgers,
                                                                          !.offloaded = newMl.offloaded]
                                                  ELSE NotLoaded]
                 /\ bookies' = IF delete THEN bookies \ T ELSE bookies
                 /\ tiered' = IF delete THEN [x \in DOMAIN tiered |-> IF x[1] \in T /\ v.offloaded[x[1]] = x[2]
                                                                  THEN "none" ELSE tiered[x]]
                              ELSE tiered
                 /\ faults' = Fault(o)
                 /\ lastAction' = [name |-> "Trim", params |-> [broker |-> b, outcome |-> o,
                                                               ledgers |-> T]]
    /\ UNCHANGED <<cnode, sub, cdata, cexists, ncomp, owner, op, moves>>

-----------------------------------------------------------------------------
\* ---- Offload ----

\* Start offloading ledger l (on the list, not offloaded as the broker sees it): its bytes are read from
\* the bookies and the upload of the object (l, b) begins.
OffloadStart(b, l) ==
    /\ known[b].loaded /\ op[b] = Idle
    /\ l \in known[b].ledgers /\ known[b].offloaded[l] = NoUid
    /\ l \in bookies
    /\ tiered' = [tiered EXCEPT ![<<l, b>>] = "partial"]
    /\ op' = [op EXCEPT ![b] = [kind |-> "offload", ledger |-> l, stage |-> "uploading"]]
    /\ lastAction' = [name |-> "OffloadStart", params |-> [broker |-> b, ledger |-> l]]
    /\ UNCHANGED <<ml, cnode, sub, bookies, cdata, cexists, ncomp, owner, known, moves, faults>>

\* The upload completes (unless a trim deleted the object meanwhile: then it is written again, an
\* orphan the failed record below deletes).
OffloadUploaded(b) ==
    /\ op[b].kind = "offload" /\ op[b].stage = "uploading"
    /\ tiered' = [tiered EXCEPT ![<<op[b].ledger, b>>] = "complete"]
    /\ op' = [op EXCEPT ![b].stage = "uploaded"]
    /\ lastAction' = [name |-> "OffloadUploaded", params |-> [broker |-> b, ledger |-> op[b].ledger]]
    /\ UNCHANGED <<ml, cnode, sub, bookies, cdata, cexists, ncomp, owner, known, moves, faults>>

\* Record the offload in the list (conditional write). On a failure the broker is fenced; it deletes
\* its object only when it knows the write did not apply (bad version).
OffloadRecord(b) ==
    /\ op[b].kind = "offload"
    /\ \/ op[b].stage = "uploaded"
       \/ op[b].stage = "uploading" /\ Mutation = "record_before_uploaded"  \* mutation: not waiting for the upload
    /\ LET l == op[b].ledger
           v == known[b]
           matches == v.version = ml.version
       IN /\ v.loaded
          /\ \E o \in Outcomes(matches) :
              LET newMl == [ml EXCEPT !.version = @ + 1, !.offloaded[l] = b]
              IN /\ ml' = IF Applied(o) THEN newMl ELSE ml
                 /\ known' = [known EXCEPT ![b] = IF o = "ok" THEN [v EXCEPT !.version = newMl.version,
                                                                          !.offloaded = newMl.offloaded]
                                                  ELSE NotLoaded]
                 /\ op' = [op EXCEPT ![b] = IF o = "ok" THEN [@ EXCEPT !.stage = "recorded"] ELSE Idle]
                 /\ tiered' = IF o = "badversion" THEN [tiered EXCEPT ![<<l, b>>] = "none"] ELSE tiered
                 /\ faults' = Fault(o)
                 /\ lastAction' = [name |-> "OffloadRecord", params |-> [broker |-> b, ledger |-> l, outcome |-> o]]
    /\ UNCHANGED <<cnode, sub, bookies, cdata, cexists, ncomp, owner, moves>>

\* After the deletion lag, the bookie copy of a recorded offload is deleted (by the broker that recorded
\* it, even if it lost the topic meanwhile: the record is durable).
DeleteBookieCopy(b) ==
    /\ op[b].kind = "offload"
    /\ \/ op[b].stage = "recorded"
       \/ op[b].stage = "uploaded" /\ Mutation = "delete_before_recorded"  \* mutation: not waiting for the record
    /\ op[b].ledger \in bookies
    /\ bookies' = bookies \ {op[b].ledger}
    /\ op' = [op EXCEPT ![b] = IF op[b].stage = "recorded" THEN Idle ELSE @]
    /\ lastAction' = [name |-> "DeleteBookieCopy", params |-> [broker |-> b, ledger |-> op[b].ledger]]
    /\ UNCHANGED <<ml, cnode, sub, tiered, cdata, cexists, ncomp, owner, known, moves, faults>>

-----------------------------------------------------------------------------
\* ---- Compaction ----

\* Phase one and two up to the compacted ledger: read the previous compacted ledger and the entries
\* after its horizon up to h (all must be readable), keep the last value per key, write a new ledger.
CompactStart(b, h) ==
    /\ known[b].loaded /\ op[b] = Idle
    /\ ncomp < MaxCompactions
    /\ LET v == known[b]
           prev == IF v.cledger = 0 THEN {} ELSE cdata[v.cledger]
           new == ncomp + 1
       IN /\ v.chorizon < h /\ h <= NumLedgers
          /\ v.cledger = 0 \/ v.cledger \in cexists
          /\ \A i \in v.chorizon + 1..h : Read(i) = "data"
          /\ ncomp' = new
          /\ cdata' = [cdata EXCEPT ![new] = Compacted(prev \cup (v.chorizon + 1..h))]
          /\ cexists' = cexists \cup {new}
          /\ op' = [op EXCEPT ![b] = [kind |-> "compact", ledger |-> new, horizon |-> h, prev |-> v.cledger]]
          /\ lastAction' = [name |-> "CompactStart", params |-> [broker |-> b, horizon |-> h, ledger |-> new]]
    /\ UNCHANGED <<ml, cnode, sub, bookies, tiered, owner, known, moves, faults>>

\* Swap the new compacted ledger in: the compaction cursor's node is written (conditional write) with
\* the horizon and the ledger; then the previous compacted ledger is deleted. On a failure the broker is
\* fenced; it deletes its new ledger only when it knows the write did not apply.
CompactSwap(b) ==
    /\ op[b].kind = "compact"
    /\ LET c == op[b]
           v == known[b]
           blind == Mutation = "swap_without_cas"   \* mutation: the swap does not compare the version
           matches == blind \/ v.cversion = cnode.version
           newC == [version |-> cnode.version + 1, ledger |-> c.ledger, horizon |-> c.horizon]
       IN /\ v.loaded
          /\ \E o \in Outcomes(matches) :
              /\ cnode' = IF Applied(o) THEN newC ELSE cnode
              /\ known' = [known EXCEPT ![b] = IF o = "ok" THEN [v EXCEPT !.cversion = newC.version,
                                                                       !.cledger = c.ledger,
                                                                       !.chorizon = c.horizon]
                                               ELSE NotLoaded]
              /\ cexists' = CASE o = "ok" -> cexists \ {c.prev}
                              [] o = "badversion" -> cexists \ {c.ledger}
                              [] OTHER -> cexists
              /\ faults' = Fault(o)
              /\ lastAction' = [name |-> "CompactSwap", params |-> [broker |-> b, ledger |-> c.ledger,
                                                                   horizon |-> c.horizon, outcome |-> o]]
    /\ op' = [op EXCEPT ![b] = Idle]
    /\ UNCHANGED <<ml, sub, bookies, tiered, cdata, ncomp, owner, moves>>

-----------------------------------------------------------------------------
Next ==
    \/ Ack
    \/ \E b \in Brokers :
        \/ Acquire(b) \/ Trim(b) \/ OffloadUploaded(b) \/ OffloadRecord(b) \/ DeleteBookieCopy(b)
        \/ CompactSwap(b)
        \/ \E l \in Ledgers : OffloadStart(b, l)
        \/ \E h \in 1..NumLedgers : CompactStart(b, h)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
\* ---- Invariants ----

TypeOK ==
    /\ ml.ledgers \subseteq Ledgers /\ ml.offloaded \in [Ledgers -> Brokers \cup {NoUid}]
    /\ cnode.ledger \in 0..MaxCompactions /\ cnode.horizon \in 0..NumLedgers
    /\ sub \in 0..NumLedgers /\ bookies \subseteq Ledgers
    /\ tiered \in [Ledgers \X Brokers -> {"none", "partial", "complete"}]
    /\ cexists \subseteq 1..ncomp /\ ncomp \in 0..MaxCompactions
    /\ owner \in Brokers /\ moves \in 0..MaxMoves /\ faults \in 0..MaxFaults

\* No entry a cursor still needs, or retention still keeps, becomes unreadable; nor any ledger the list
\* still has (a new subscription from the earliest position, or the next owner, reads it).
NeededReadable == \A l \in Ledgers : (Needed(l) \/ l \in ml.ledgers) => Read(l) # "missing"

\* An offloaded ledger reads the same bytes as it did from the bookies (the object the list records is
\* complete).
OffloadedReadsSame == \A l \in ml.ledgers : ml.offloaded[l] # NoUid => Read(l) = "data"

\* A compacted reader (is_read_compacted) reads the compacted ledger, then the entries after its
\* horizon: it sees, per key, the last value at or before the horizon (none for a deleted key), then
\* everything after it.
CompactedReadCorrect ==
    cnode.ledger # 0 =>
        /\ cnode.ledger \in cexists
        /\ cdata[cnode.ledger] = Live(1..cnode.horizon)
        /\ \A i \in cnode.horizon + 1..NumLedgers : Read(i) = "data"

\* Never a deleted key: no value in the compacted ledger has a later empty payload of its key at or
\* before the horizon.
CompactedNoDeletedKey ==
    cnode.ledger # 0 =>
        \A i \in cdata[cnode.ledger] :
            ~\E j \in Deletes : i < j /\ j <= cnode.horizon /\ Key(j) = Key(i)
=============================================================================
