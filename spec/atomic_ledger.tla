---------------------------- MODULE atomic_ledger ----------------------------
(***************************************************************************)
(* A BookKeeper ledger as one atomic object: the abstraction fencing.tla   *)
(* uses for each of its ledgers, and what ledger.tla refines (checked by   *)
(* TLC: ledger.tla's AtomicLedgerInit and AtomicLedgerSteps; atomic_ledger.md).   *)
(*                                                                         *)
(* The writer pushes entries 0, 1, ... in order; it confirms them in       *)
(* order (the LAC); the ledger is closed once, at an end that lies between *)
(* the LAC and the last entry pushed; a closed ledger's content is entries *)
(* 0 .. end and never changes.  After the close the writer may still       *)
(* confirm entries, but only at or below the end: an add in flight when   *)
(* the ledger was fenced is either inside the closed ledger or never       *)
(* confirmed.  Entries between the LAC and the end were never             *)
(* acknowledged (a recovery found them on some bookie): a reader sees      *)
(* them, a producer never had them confirmed.                              *)
(*                                                                         *)
(* Entry ids start at 0; -1 (NoEntry) is "none".                           *)
(***************************************************************************)
EXTENDS Integers

CONSTANT NumEntries     \* entries 0 .. NumEntries-1 at most

NoEntry == -1
Entries == 0 .. NumEntries - 1

\* Issue 47 (overridden in a mutation model's CONSTANTS; "none" everywhere else, the instance in
\* ledger_refines_atomic.tla included): "confirm_past_end" drops Confirm's closed-end guard,
\* "content_lags" leaves a reader's content behind a confirm while OPEN.
AtomicMutation == "none"

VARIABLES
    state,      \* "OPEN" (also while being recovered) | "CLOSED"
    pushed,     \* the highest entry the writer sent (NoEntry: none)
    lac,        \* the highest entry confirmed to the writer's application; every one below too
    end,        \* the closed last entry (NoEntry while OPEN, or closed empty)
    content     \* what a reader of the ledger reads: 0 .. lac while OPEN, 0 .. end once CLOSED

vars == <<state, pushed, lac, end, content>>

Init ==
    /\ state = "OPEN"
    /\ pushed = NoEntry
    /\ lac = NoEntry
    /\ end = NoEntry
    /\ content = {}

\* The writer sends the next entry (it does not know whether the ledger was closed).
Push ==
    /\ pushed < NumEntries - 1
    /\ pushed' = pushed + 1
    /\ UNCHANGED <<state, lac, end, content>>

\* The writer confirms entries up to n (in order; several at once when a late ack completes a
\* prefix). Once CLOSED, only up to the closed end.
Confirm(n) ==
    /\ n \in lac + 1 .. pushed
    /\ (state = "CLOSED" /\ AtomicMutation # "confirm_past_end") => n <= end
    /\ lac' = n
    /\ content' = IF state = "OPEN" /\ AtomicMutation # "content_lags" THEN 0 .. n ELSE content
    /\ UNCHANGED <<state, pushed, end>>

\* Close at e: the writer's close at its LAC, or a recovery's at what it found (at least the LAC,
\* at most what was pushed).
Close(e) ==
    /\ state = "OPEN"
    /\ e \in lac .. pushed
    /\ state' = "CLOSED"
    /\ end' = e
    /\ content' = 0 .. e
    /\ UNCHANGED <<pushed, lac>>

Next == Push \/ (\E n \in Entries : Confirm(n)) \/ (\E e \in Entries \cup {NoEntry} : Close(e))

Spec == Init /\ [][Next]_vars

\* What the abstraction promises, as invariants of this module (they follow from its actions).
LacWithinEnd == state = "CLOSED" => lac <= end
ContentIsAPrefix == content = 0 .. (IF state = "CLOSED" THEN end ELSE lac)

TypeOK ==
    /\ state \in {"OPEN", "CLOSED"}
    /\ {pushed, lac, end} \subseteq Entries \cup {NoEntry}
    /\ content \subseteq Entries
=============================================================================
