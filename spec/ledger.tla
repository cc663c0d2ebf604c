-------------------------------- MODULE ledger --------------------------------
(***************************************************************************)
(* One BookKeeper ledger: a writer adding entries to bookies, recovery    *)
(* clients fencing and closing it, and faults (lost messages, bookie      *)
(* crashes, a permanently failed bookie); docs/protocol-rules.md          *)
(*                                                                         *)
(* Entry ids start at 0; -1 means "no entry" (an empty ledger's end, an   *)
(* initial LAC). Metadata is updated only by conditional write (CW): each *)
(* CW is one atomic step that checks its precondition on the CURRENT      *)
(* metadata. This is sound because the implementation's read-modify-CW    *)
(* loop re-reads and re-checks on every version conflict, so its net      *)
(* effect is the check-and-set at the instant of the successful write.    *)
(*                                                                         *)
(* Switches defined below and overridden by a model's cfg (so the other   *)
(* models need not name them): SharedFate (ledger-deep's network) and    *)
(* JournalSyncData (FALSE: a bookie acknowledges an add before its        *)
(* journal is synced, and a crash loses the unsynced tail; BookKeeper's   *)
(* journalSyncData = false).                                              *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets, TLC

CONSTANTS
    Bookies,            \* bookie ids (symmetric model values)
    Writer,             \* the one writer (a model value)
    Recoverers,         \* recovery clients (model values)
    E, Qw, Qa,          \* ensemble size, write quorum, ack quorum
    NumEntries,         \* the writer adds entries 0 .. NumEntries-1 at most
    MaxFragments,       \* bound on the length of a fragment list (ensemble changes)
    MaxLostMessages,    \* fault switch: how many messages may be lost (timeouts)
    MaxCrashes,         \* fault switch: how many bookie crashes (each followed by a restart)
    MaxPermanentFailures, \* fault switch: how many bookies may fail for good
    Mutation            \* "none" or one of the known bugs below (each .cfg picks one)

ASSUME /\ E >= Qw /\ Qw >= Qa /\ Qa >= 1 /\ Cardinality(Bookies) >= E
       /\ NumEntries >= 1 /\ MaxFragments >= 1
       /\ Mutation \in {"none",
                        "recovery_read_no_fence",      \* BookKeeper issue 2614
                        "recovery_start_from_lac",     \* BookKeeper issue 2615
                        "negative_threshold_qa",       \* Qa negatives instead of Qw-Qa+1
                        "read_lac_one_answer",         \* the fencing read-LAC done after one answer
                        \* issue 47: each violates a property no other ci model violates (spec/ledger.md)
                        "lac_starts_at_zero",          \* the writer's handle starts with entry 0 confirmed
                        "confirm_on_one_ack",          \* an entry confirmed on its first acknowledgement
                        "writer_close_overwrites",     \* the writer's close overwrites a closed ledger
                        "close_length_of_pushed",      \* the writer closes with its last pushed entry's length
                        "close_before_write_back",     \* recovery closes before its write-back reached Qa
                        "write_back_never_done"}       \* recovery waits for one entry past its end: never closes

Clients == {Writer} \cup Recoverers
Entries == 0 .. NumEntries - 1
NoEntry == -1
\* Ledger lengths. Every entry's header carries the ledger length up to and including it, fixed by
\* the writer (a recovery write-back copies it), so the length at entry e is a function of e that
\* grows with e (payloads are not empty). The spec counts it in entries: the length at e is e + 1,
\* an empty ledger's 0 (the conformance harness's payloads all have one size).
LengthAt(e) == e + 1
Max(a, b) == IF a >= b THEN a ELSE b
Range(f) == { f[i] : i \in DOMAIN f }
\* x \in Range(f), without building the set (TLC: cheaper in the guards evaluated on every state).
InSeq(f, x) == \E i \in DOMAIN f : f[i] = x

(***************************************************************************)
(* Fragments and write sets.                                              *)
(* A fragment list is a sequence of [first, ens]; ens is a sequence of E  *)
(* distinct bookies. The fragment of entry e is the one with the greatest *)
(* first id <= e. The write set of e in ensemble ens is the bookies at    *)
(* indices (e + i) mod E, i in 0..Qw-1: by ABSOLUTE entry id (striping).   *)
(***************************************************************************)
FragmentOf(frags, e) ==
    frags[CHOOSE i \in 1 .. Len(frags) :
              /\ frags[i].first <= e
              /\ \A j \in 1 .. Len(frags) : frags[j].first <= e => j <= i]
WriteSetIn(ens, e) == { ens[((e + i) % E) + 1] : i \in 0 .. Qw - 1 }
WriteSet(frags, e) == WriteSetIn(FragmentOf(frags, e).ens, e)
LastEnsemble(frags) == frags[Len(frags)].ens
\* The E distinct write sets of an ensemble (striping: E > Qw gives E different ones).
AllWriteSets(ens) == { WriteSetIn(ens, i) : i \in 0 .. E - 1 }

\* Recovery reads: one OK means the entry exists; this many negatives mean it is the end.
\* Reads are sequential, BookKeeper's default (enableParallelRecoveryRead = false): one bookie of
\* the entry's write set at a time, in write-set order, the next one after a negative answer or a
\* timeout; all Qw asked with neither an OK nor enough negatives fails the attempt.
NegativeThreshold == IF Mutation = "negative_threshold_qa" THEN Qa ELSE Qw - Qa + 1

\* A fragment list with bookie b of the last ensemble replaced by nb, from entry `from` on.
\* As BookKeeper does (a sorted map put), a new fragment at the same first id replaces the
\* last one; otherwise it is appended (an append at a smaller first id is invalid: issue 2615).
ReplaceBookie(frags, b, nb, from) ==
    LET old == LastEnsemble(frags)
        ens == [i \in 1 .. E |-> IF old[i] = b THEN nb ELSE old[i]]
        frag == [first |-> from, ens |-> ens]
    IN IF frags[Len(frags)].first = from
       THEN [frags EXCEPT ![Len(frags)] = frag]
       ELSE Append(frags, frag)

\* Dead-variable reduction ("Stopped"): a variable no action, invariant or property reads again
\* is reset to its initial value, so states that differ only in it are one. Once the writer stopped
\* (wState # "WRITING", for good), wAcks and wSentLac are dead (every reader requires WRITING); once
\* a recovery attempt's fencing is covered, rAnswered and rMaxLac are (read only while "fencing");
\* once it found the end, rNegatives and rTried are (read only while "reading").
NoAcks == [e \in Entries |-> {}]
NoLacs == [e \in Entries |-> NoEntry]

\* The highest l >= lac such that every entry in lac+1..l has Qa acks (in-order completion).
AckQuorum == IF Mutation = "confirm_on_one_ack" THEN 1 ELSE Qa
ConfirmedUpTo(acks, lac, pushed) ==
    CHOOSE l \in lac .. pushed :
        /\ \A e \in lac + 1 .. l : Cardinality(acks[e]) >= AckQuorum
        /\ (l < pushed => Cardinality(acks[l + 1]) < AckQuorum)

VARIABLES
    meta,           \* ledger metadata: [state, lastEntry, length, fragments] (the metadata store's node)
    \* bookies
    entries,        \* entries[b]: entry ids bookie b stores durably (journalled and fsynced; under
                    \* JournalSyncData = FALSE what a crash keeps is durableState's)
    fenced,         \* fenced[b]: the durable, irreversible fenced flag of the ledger on b
    bookieLac,      \* bookieLac[b]: the LAC in the header of b's last (highest) entry, which a read-LAC
                    \* answer carries (durable: it rides in the entry); NoEntry while b stores none
    durableState,   \* durableState[b]: {} when all b holds is durable (always, under JournalSyncData);
                    \* else {[entries, lac]}: b's entries and bookieLac at its journal's last sync, the
                    \* state a crash takes it back to (its journal has an unsynced tail since then)
    up,             \* up[b]: b is running (FALSE while crashed or after a permanent failure)
    failed,         \* bookies that failed for good (their disks are gone)
    \* the network
    msgs,           \* messages in flight: a set of records (see Msg)
    \* the writer
    wState,         \* "WRITING" | "CLOSED" | "FENCED" | "FAILED"
    wPushed,        \* last_add_pushed: the highest entry id sent
    wLac,           \* the writer's last add confirmed (every entry <= wLac acknowledged to the application)
    wAcks,          \* wAcks[e]: bookies that acknowledged pending entry e (cleared once confirmed)
    wSentLac,       \* wSentLac[e]: the LAC pending entry e carries: wLac when it was first sent; a re-send
                    \* carries the same encoded entry (cleared to NoEntry once confirmed)
    wFragments,     \* the writer's view of the fragment list
    \* recovery clients (functions over Recoverers)
    rPhase,         \* "idle" | "fencing" | "reading" | "closing" | "done" | "aborted"
    rAnswered,      \* bookies that answered the fencing read-LAC
    rMaxLac,        \* the largest LAC among those answers
    rReadFragments, \* the fragment list read at recovery start: where recovery READS entries
    rFragments,     \* the local fragment list: where recovery WRITES BACK (local ensemble changes)
    rNext,          \* the entry id being read
    rNegatives,     \* bookies that answered "no such entry" for rNext
    rTried,         \* how many bookies of rNext's write set were asked so far (sequential reads)
    rWbAcks,        \* rWbAcks[e]: bookies that acknowledged the recovery add of e (cleared once confirmed)
    rWbSentLac,     \* rWbSentLac[e]: the LAC the recovery add of e carries (as wSentLac; cleared once confirmed)
    rWbLac,         \* every entry <= rWbLac is recovered (written back to Qa bookies or known confirmed)
    rEnd,           \* the recovered last entry (meaningful in "closing" and "done")
    rLength,        \* the length recovery will close with: the read-LAC's (the header that carried the
                    \* largest LAC), then each entry read brings its own
    \* fault budgets
    lost, crashes,
    \* auxiliary, for conformance only: [name, params] of the last action; not in the VIEW
    lastAction

bookieVars == <<entries, fenced, bookieLac, durableState, up, failed>>
writerVars == <<wState, wPushed, wLac, wAcks, wSentLac, wFragments>>
recVars == <<rPhase, rAnswered, rMaxLac, rReadFragments, rFragments, rNext, rNegatives, rTried,
             rWbAcks, rWbSentLac, rWbLac, rEnd, rLength>>
vars == <<meta, bookieVars, msgs, writerVars, recVars, lost, crashes, lastAction>>

\* Fingerprint without lastAction: states that differ only in how they were reached are one.
view == <<meta, bookieVars, msgs, writerVars, recVars, lost, crashes>>

(***************************************************************************)
(* Messages: one record shape for every kind, only the fields that matter *)
(* (no payload: entry e's content is fixed by the writer, so the id names *)
(* it; no ledger id: one ledger). `val` carries per kind:                 *)
(*   "add"         writer -> bookie, val = piggybacked LAC                *)
(*   "recoveryAdd" recovery -> bookie (skips the fence check), val = LAC  *)
(*   "addResp"     bookie -> client, val = 1 OK, 0 EFENCED                *)
(*   "readLac"     recovery -> bookie, read-LAC with the fence flag       *)
(*   "readLacResp" bookie -> recovery, val = its last entry's LAC header  *)
(*   "read"        recovery -> bookie, val = 1 with the fence flag, 0 not *)
(*   "readResp"    bookie -> recovery, val = 1 OK, 0 ENOENTRY/ENOLEDGER   *)
(* Messages form a set: two identical messages in flight act as one,      *)
(* which is sound because every handler is idempotent.                    *)
(***************************************************************************)
Msg(kind, c, b, e, v) == [kind |-> kind, client |-> c, bookie |-> b, entry |-> e, val |-> v]
Requests == {"add", "recoveryAdd", "readLac", "read"}
InFlight(kind, c, b, e) == \E m \in msgs : m.kind = kind /\ m.client = c /\ m.bookie = b /\ m.entry = e
NoMessagesOf(c) == \A m \in msgs : m.client # c

\* New requests go out through Sends(base, reqs): msgs' is base with reqs added, as the network lets
\* them go. SharedFate (a definition, FALSE unless a model's CONSTANTS set it; ledger-deep sets it) picks
\* the network of a request sent to a bookie that is down (spec/ledger.md, "Reductions and what each
\* assumes", SharedFate, argues that TRUE is BookKeeper's network and says what it leaves out):
\*   FALSE, the general network: it stays in flight on its own until it is dropped
\*     (RequestToDownBookieLost) or the bookie restarts and handles it.
\*   TRUE, BookKeeper's PerChannelBookieClient (and pulsar-ref's stream per bookie): the client has no
\*     connection to the bookie, so the request starts a connection attempt, and every request the
\*     client sends the bookie until the attempt resolves waits in the attempt's queue. They share its
\*     fate: the attempt fails (all are failed, in the step that starts it; the client's timeouts then
\*     see them gone) or it connects once the bookie is up again (all are handed to the restarted
\*     bookie, from its restart on). While a bookie is down, a client's requests in flight to it are
\*     exactly its attempt's queue (a crash loses every request at the bookie), so Queued(c, b) says
\*     whether c has an attempt pending; a queued request is not on the wire, so it is not lost alone.
\* Ensemble changes re-send only to bookies that are up.
SharedFate == FALSE
Queued(c, b) == \E m \in msgs : m.client = c /\ m.bookie = b
\* The bookies reqs start a connection attempt to: down, with nothing of the sender queued for them.
NewAttempts(reqs) == {r.bookie : r \in {q \in reqs : ~up[q.bookie] /\ ~Queued(q.client, q.bookie)}}
Sends(base, reqs) ==
    IF SharedFate
    THEN \E failedAttempts \in SUBSET NewAttempts(reqs) :
            msgs' = base \cup {m \in reqs : m.bookie \notin failedAttempts}
    ELSE msgs' = base \cup reqs

\* Does a bookie acknowledge an add only once its journal record is synced (fsynced)? TRUE (as
\* BookKeeper's journalSyncData = true and pulsar-ref's journal: replies wait for the write that is
\* its fdatasync): journalling, syncing and replying are one step, and durableState stays {}.
\* FALSE (the switch, `JournalSyncData = FALSE` in a model's cfg; a known unsafe configuration,
\* expected to violate AckedEntriesReadable): an accepted add is stored and acknowledged with its
\* record written but not synced; the journal is synced later (BookieSyncs: a roll, the page cache
\* written back) or by a fence, whose record is synced before its answer and, the journal being one
\* sequential file, makes every earlier record durable too; a crash loses the unsynced tail.
JournalSyncData == TRUE

Init ==
    \E ens \in [1 .. E -> Bookies] :
        /\ \A i, j \in 1 .. E : i # j => ens[i] # ens[j]
        /\ meta = [state |-> "OPEN", lastEntry |-> NoEntry, length |-> 0,
                   fragments |-> <<[first |-> 0, ens |-> ens]>>]
        /\ wFragments = meta.fragments
    /\ entries = [b \in Bookies |-> {}]
    /\ fenced = [b \in Bookies |-> FALSE]
    /\ bookieLac = [b \in Bookies |-> NoEntry]
    /\ durableState = [b \in Bookies |-> {}]
    /\ up = [b \in Bookies |-> TRUE]
    /\ failed = {}
    /\ msgs = {}
    /\ wState = "WRITING"
    /\ wPushed = NoEntry
    /\ wLac = (IF Mutation = "lac_starts_at_zero" THEN 0 ELSE NoEntry)
    /\ wAcks = [e \in Entries |-> {}]
    /\ wSentLac = [e \in Entries |-> NoEntry]
    /\ rPhase = [c \in Recoverers |-> "idle"]
    /\ rAnswered = [c \in Recoverers |-> {}]
    /\ rMaxLac = [c \in Recoverers |-> NoEntry]
    /\ rReadFragments = [c \in Recoverers |-> <<>>]
    /\ rFragments = [c \in Recoverers |-> <<>>]
    /\ rNext = [c \in Recoverers |-> 0]
    /\ rNegatives = [c \in Recoverers |-> {}]
    /\ rTried = [c \in Recoverers |-> 0]
    /\ rWbAcks = [c \in Recoverers |-> [e \in Entries |-> {}]]
    /\ rWbSentLac = [c \in Recoverers |-> [e \in Entries |-> NoEntry]]
    /\ rWbLac = [c \in Recoverers |-> NoEntry]
    /\ rEnd = [c \in Recoverers |-> NoEntry]
    /\ rLength = [c \in Recoverers |-> 0]
    /\ lost = 0
    /\ crashes = 0
    /\ lastAction = [name |-> "Init", params |-> [none |-> 0]]

-----------------------------------------------------------------------------
(***************************************************************************)
(* The writer (impl/bookie/client/writer.py)                              *)
(***************************************************************************)

\* entry_id = ++last_add_pushed; send it, with the current LAC, to its write set.
WriterSendsAdd ==
    /\ wState = "WRITING"
    /\ wPushed < NumEntries - 1
    /\ LET e == wPushed + 1 IN
       /\ wPushed' = e
       /\ wSentLac' = [wSentLac EXCEPT ![e] = wLac]
       /\ Sends(msgs, {Msg("add", Writer, b, e, wLac) : b \in WriteSet(wFragments, e)})
       /\ lastAction' = [name |-> "WriterSendsAdd", params |-> [entry |-> e, lac |-> wLac]]
    /\ UNCHANGED <<meta, bookieVars, wState, wLac, wAcks, wFragments, recVars, lost, crashes>>

\* An add response, as BookKeeper's PendingAddOp.writeComplete takes it. An answer counts only
\* while the entry is pending and b is still in its write set (an answer from a replaced bookie
\* is ignored). An OK is an ack; completion is in order: LAC = the longest confirmed prefix.
\* EFENCED is unrecoverable (pending adds fail, the handle stops), unless the add already has Qa
\* acks: PendingAddOp ignores any error once it "completed" (an under-replicated entry, not a
\* failure); an entry already confirmed completed long ago.
WriterHandlesAddReply(m, req) ==
    /\ m.kind = "addResp" /\ m.client = Writer
    /\ msgs' = msgs \ {req}
    /\ LET e == m.entry
           current == wState = "WRITING" /\ wLac < e /\ e <= wPushed /\ m.bookie \in WriteSet(wFragments, e)
           counts == current /\ m.val = 1
           fencedNow == current /\ m.val = 0 /\ Cardinality(wAcks[e]) < Qa
           acks == [wAcks EXCEPT ![e] = @ \cup {m.bookie}]
           lac == ConfirmedUpTo(acks, wLac, wPushed)
       IN /\ IF counts
             THEN /\ wLac' = lac
                  \* confirmed entries' acks and LACs are never looked at again: forget them (smaller state)
                  /\ wAcks' = [x \in Entries |-> IF x <= lac THEN {} ELSE acks[x]]
                  /\ wSentLac' = [x \in Entries |-> IF x <= lac THEN NoEntry ELSE wSentLac[x]]
                  /\ UNCHANGED wState
             ELSE IF fencedNow
             THEN /\ wState' = "FENCED"
                  /\ wAcks' = NoAcks /\ wSentLac' = NoLacs   \* dead from now on (see Stopped)
                  /\ UNCHANGED wLac
             ELSE UNCHANGED <<wState, wLac, wAcks, wSentLac>>
          /\ lastAction' = [name |-> "WriterReceivesAddResponse",
                            params |-> [bookie |-> m.bookie, entry |-> e, ok |-> m.val = 1, counted |-> counts]]
    /\ UNCHANGED <<meta, up, failed, wPushed, wFragments, recVars, lost, crashes>>

\* A timeout: pending entry e has no ack from b, fewer than Qa acks, and nothing in flight
\* between the writer and b about e (the request or its response was lost, or b is down).
\* Reduction: only entries still short of Qa acks time out (BookKeeper's delayed ensemble
\* change); a missing extra copy of an entry that reached Qa never forces a change.
WriterTimedOut(b, e) ==
    /\ wLac < e /\ e <= wPushed
    /\ b \in WriteSet(wFragments, e) /\ b \notin wAcks[e]
    /\ Cardinality(wAcks[e]) < Qa
    /\ ~InFlight("add", Writer, b, e) /\ ~InFlight("addResp", Writer, b, e)

\* Ensemble change by CW: a new fragment at LAC+1 with b replaced by nb (a registered, i.e. up,
\* bookie not in the ensemble), only while OPEN and b still in place. Then unacknowledged adds are
\* re-sent to nb (and b's acks of them forgotten), each with the LAC it was first sent with
\* (PendingAddOp re-sends the entry it encoded once). Re-read metadata IN_RECOVERY = fenced,
\* CLOSED = failed.
\* (Guard order, for TLC's speed only: b # nb and up[nb] are implied by the rest and cheap, and with no
\* spare bookie ~InSeq(.., nb) fails first; TLC evaluates this guard for each of the |Bookies|^2 pairs.)
WriterChangesEnsemble(b, nb) ==
    /\ wState = "WRITING"
    /\ b # nb /\ up[nb]
    /\ ~InSeq(LastEnsemble(wFragments), nb)
    /\ InSeq(LastEnsemble(wFragments), b)
    /\ \E e \in Entries : WriterTimedOut(b, e)
    /\ LET frags == ReplaceBookie(wFragments, b, nb, wLac + 1) IN
       /\ Len(frags) <= MaxFragments
       /\ CASE meta.state = "OPEN" /\ meta.fragments = wFragments ->
                 /\ meta' = [meta EXCEPT !.fragments = frags]
                 /\ wFragments' = frags
                 /\ wAcks' = [e \in Entries |-> wAcks[e] \ {b}]
                 /\ msgs' = msgs \cup {Msg("add", Writer, nb, e, wSentLac[e]) :
                                       e \in {x \in wLac + 1 .. wPushed : nb \in WriteSet(frags, x)}}
                 /\ UNCHANGED wState
            [] meta.state = "IN_RECOVERY" ->
                 /\ wState' = "FENCED" /\ wAcks' = NoAcks /\ UNCHANGED <<meta, wFragments, msgs>>
            [] OTHER ->
                 /\ wState' = "FAILED" /\ wAcks' = NoAcks /\ UNCHANGED <<meta, wFragments, msgs>>
       /\ lastAction' = [name |-> "WriterChangesEnsemble",
                         params |-> [failed |-> b, replacement |-> nb, first |-> wLac + 1,
                                     outcome |-> meta.state]]
    /\ wSentLac' = IF wState' = "WRITING" THEN wSentLac ELSE NoLacs
    /\ UNCHANGED <<bookieVars, wPushed, wLac, recVars, lost, crashes>>

\* Writer close by CW, with the code's semantics: if not CLOSED (also when IN_RECOVERY) write
\* CLOSED with the writer's LAC and its length there; if CLOSED with the same last entry AND length
\* succeed (BookKeeper's LedgerHandle close compares both); otherwise fail. Pending adds fail.
WriterCloses ==
    /\ wState = "WRITING"
    /\ CASE meta.state # "CLOSED" \/ Mutation = "writer_close_overwrites" ->
              /\ meta' = [meta EXCEPT !.state = "CLOSED", !.lastEntry = wLac,
                                      !.length = LengthAt(IF Mutation = "close_length_of_pushed" THEN wPushed ELSE wLac)]
              /\ wState' = "CLOSED"
         [] meta.lastEntry = wLac /\ meta.length = LengthAt(wLac) ->
              /\ wState' = "CLOSED" /\ UNCHANGED meta
         [] OTHER ->
              /\ wState' = "FAILED" /\ UNCHANGED meta
    /\ lastAction' = [name |-> "WriterCloses", params |-> [lac |-> wLac, outcome |-> meta.state]]
    /\ wAcks' = NoAcks /\ wSentLac' = NoLacs
    /\ UNCHANGED <<bookieVars, msgs, wPushed, wLac, wFragments, recVars, lost, crashes>>

-----------------------------------------------------------------------------
(***************************************************************************)
(* Bookies (impl/bookie/core.py). Justified atomicity: receiving a        *)
(* request, journalling it, fsyncing and replying is one step. A crash    *)
(* before the fsync is then the same as the request being lost: no reply *)
(* was sent, and (assumption) the entry is not read before it is durable. *)
(* With JournalSyncData = FALSE an add's fsync is not part of its step:   *)
(* durableState keeps what a crash would leave.                            *)
(***************************************************************************)

\* What bookie b holds durably: its state at its journal's last sync, or all of it when nothing is
\* unsynced.
Durable(b) == IF durableState[b] = {} THEN [entries |-> entries[b], lac |-> bookieLac[b]]
              ELSE CHOOSE s \in durableState[b] : TRUE
\* b's journal is synced (a fence record's sync makes every earlier record durable too).
Synced(b) == [durableState EXCEPT ![b] = {}]

\* Add: a fenced bookie rejects a writer's add with EFENCED; a recovery add skips the fence check.
\* An accepted add of an id at or above every stored one becomes b's last entry (a later copy of
\* the last entry replaces it: ledger storage keeps the latest write), so its LAC is bookieLac.
AddAccepted(m) == m.kind = "recoveryAdd" \/ ~fenced[m.bookie]
BookieReceivesAdd(m) ==
    /\ entries' = IF AddAccepted(m) THEN [entries EXCEPT ![m.bookie] = @ \cup {m.entry}] ELSE entries
    /\ bookieLac' = IF AddAccepted(m) /\ \A x \in entries[m.bookie] : x <= m.entry
                    THEN [bookieLac EXCEPT ![m.bookie] = m.val] ELSE bookieLac
    \* JournalSyncData = FALSE: the record is written, not synced; the reply goes out all the same.
    \* The first unsynced record marks what b held at the last sync (a rejected add writes nothing).
    /\ durableState' = IF ~JournalSyncData /\ AddAccepted(m) /\ durableState[m.bookie] = {}
                       THEN [durableState EXCEPT ![m.bookie] = {Durable(m.bookie)}]
                       ELSE durableState
    /\ UNCHANGED fenced
AddReply(m) == Msg("addResp", m.client, m.bookie, m.entry, IF AddAccepted(m) THEN 1 ELSE 0)

\* Read-LAC with the fence flag (BookKeeper: a fenced read of entry -1, "your last entry"): fence
\* (durably, creating the ledger if unknown), reply with the last entry, i.e. with the LAC in its
\* header (which can be below a LAC the bookie saw on an earlier entry).
BookieReceivesReadLac(m) ==
    /\ fenced' = [fenced EXCEPT ![m.bookie] = TRUE]
    /\ durableState' = Synced(m.bookie)   \* the fence record is synced before the answer
    /\ UNCHANGED <<entries, bookieLac>>
LastEntryOf(b) == IF entries[b] = {} THEN NoEntry ELSE CHOOSE e \in entries[b] : \A x \in entries[b] : x <= e
\* entry = the id of that last entry (its header's length is LengthAt(entry)), val = its LAC.
ReadLacReply(m) == Msg("readLacResp", m.client, m.bookie, LastEntryOf(m.bookie), bookieLac[m.bookie])

\* Read of one entry, fencing first when the flag is set; reads work on fenced ledgers.
BookieReceivesRead(m) ==
    /\ fenced' = IF m.val = 1 THEN [fenced EXCEPT ![m.bookie] = TRUE] ELSE fenced
    /\ durableState' = IF m.val = 1 THEN Synced(m.bookie) ELSE durableState
    /\ UNCHANGED <<entries, bookieLac>>
ReadReply(m) == Msg("readResp", m.client, m.bookie, m.entry, IF m.entry \in entries[m.bookie] THEN 1 ELSE 0)

BookieHandles(m) ==
    CASE m.kind \in {"add", "recoveryAdd"} -> BookieReceivesAdd(m)
      [] m.kind = "readLac" -> BookieReceivesReadLac(m)
      [] OTHER -> BookieReceivesRead(m)
Reply(m) ==
    CASE m.kind \in {"add", "recoveryAdd"} -> AddReply(m)
      [] m.kind = "readLac" -> ReadLacReply(m)
      [] OTHER -> ReadReply(m)

-----------------------------------------------------------------------------
(***************************************************************************)
(* Recovery clients: impl/bookie/client/recovery.py, the fencing read-LAC *)
(* in impl/bookie/client/read_lac.py.                                     *)
(***************************************************************************)

\* Per-write-set coverage: every write set of the ensemble has fewer than Qa bookies that did
\* not answer, so the old writer can no longer reach Qa on any write set.
\* Mutation "read_lac_one_answer" weakens it to one answer (spec/ledger.md: safety does not depend on it).
CoveredBy(c, answered) ==
    IF Mutation = "read_lac_one_answer" THEN answered # {}
    ELSE \A ws \in AllWriteSets(LastEnsemble(rReadFragments[c])) : Cardinality(ws \ answered) < Qa
Covered(c) == CoveredBy(c, rAnswered[c])

\* Where recovery starts reading (in RecoveryReceivesReadLacResponse): max(LAC, first entry of the
\* last fragment - 1): entries before the last fragment were confirmed when the writer made it
\* (a change is made at LAC+1). Mutation "recovery_start_from_lac" starts from the LAC alone.

\* The fenced read of entry e to the i-th bookie (from 0) of its write set; mutation
\* "recovery_read_no_fence" sends it without the fence flag.
ReadAt(c, e, i) ==
    {Msg("read", c, FragmentOf(rReadFragments[c], e).ens[((e + i) % E) + 1], e,
         IF Mutation = "recovery_read_no_fence" THEN 0 ELSE 1)}

\* Start (or retry) recovery. CLOSED: adopt its end. OPEN -> IN_RECOVERY by CW (already
\* IN_RECOVERY: go on, the previous recoverer may be gone). Then fencing read-LAC to the last
\* ensemble. A retry waits until nothing of the previous attempt is in flight (assumption: the
\* implementation tags requests and ignores stale replies; this reduction drops behaviours where
\* an old attempt's request lands during the new one, which only repeat idempotent fencing/reads
\* or recovery adds of genuine entries).
RecoveryStarts(c) ==
    /\ rPhase[c] \in {"idle", "aborted"}
    /\ NoMessagesOf(c)
    /\ IF meta.state = "CLOSED"
       THEN /\ rPhase' = [rPhase EXCEPT ![c] = "done"]
            /\ rEnd' = [rEnd EXCEPT ![c] = meta.lastEntry]
            /\ UNCHANGED <<meta, msgs, rReadFragments, rFragments>>
       ELSE /\ meta' = [meta EXCEPT !.state = "IN_RECOVERY"]
            /\ rPhase' = [rPhase EXCEPT ![c] = "fencing"]
            /\ rReadFragments' = [rReadFragments EXCEPT ![c] = meta.fragments]
            /\ rFragments' = [rFragments EXCEPT ![c] = meta.fragments]
            /\ Sends(msgs, {Msg("readLac", c, b, NoEntry, 0) : b \in Range(LastEnsemble(meta.fragments))})
            /\ UNCHANGED rEnd
    /\ lastAction' = [name |-> "RecoveryStarts", params |-> [client |-> c, outcome |-> meta.state]]
    /\ UNCHANGED <<bookieVars, writerVars, rAnswered, rMaxLac, rNext, rNegatives, rTried, rWbAcks, rWbSentLac,
                   rWbLac, rLength, lost, crashes>>

\* A fencing read-LAC answer (OK, ENOENTRY, ENOLEDGER all count). As ReadLastConfirmedOp, keep the
\* header (LAC and length) of the first answer with the largest LAC. Once covered, read the first
\* entry after the start point: LedgerRecoveryOp does not read the start entry itself (its LAC
\* starts there, its length is the read-LAC's).
RecoveryHandlesReadLacReply(m, req) ==
    /\ m.kind = "readLacResp" /\ m.client \in Recoverers
    /\ LET c == m.client
           answered == rAnswered[c] \cup {m.bookie}
           maxLac == Max(rMaxLac[c], m.val)
           covered == CoveredBy(c, answered)
           start == IF Mutation = "recovery_start_from_lac" THEN maxLac
                    ELSE Max(maxLac, rReadFragments[c][Len(rReadFragments[c])].first - 1)
       IN /\ IF rPhase[c] = "fencing"
             THEN /\ rLength' = IF m.val > rMaxLac[c] THEN [rLength EXCEPT ![c] = LengthAt(m.entry)] ELSE rLength
                  /\ IF covered
                     THEN /\ rPhase' = [rPhase EXCEPT ![c] = "reading"]
                          \* fencing's answers are dead from now on (see Stopped)
                          /\ rAnswered' = [rAnswered EXCEPT ![c] = {}]
                          /\ rMaxLac' = [rMaxLac EXCEPT ![c] = NoEntry]
                          /\ rNext' = [rNext EXCEPT ![c] = start + 1]
                          /\ rWbLac' = [rWbLac EXCEPT ![c] = start]
                          /\ Sends(msgs \ {req}, ReadAt(c, start + 1, 0))
                          /\ rTried' = [rTried EXCEPT ![c] = 1]
                     ELSE /\ rAnswered' = [rAnswered EXCEPT ![c] = answered]
                          /\ rMaxLac' = [rMaxLac EXCEPT ![c] = maxLac]
                          /\ msgs' = msgs \ {req}
                          /\ UNCHANGED <<rPhase, rNext, rWbLac, rTried>>
             ELSE /\ msgs' = msgs \ {req}
                  /\ UNCHANGED <<rPhase, rAnswered, rMaxLac, rNext, rWbLac, rLength, rTried>>
          /\ lastAction' = [name |-> "RecoveryReceivesReadLacResponse",
                            params |-> [client |-> c, bookie |-> m.bookie, lac |-> m.val,
                                        stale |-> rPhase[c] # "fencing"]]
    /\ UNCHANGED <<meta, up, failed, writerVars, rReadFragments, rFragments, rNegatives, rWbAcks,
                   rWbSentLac, rEnd, lost, crashes>>

\* Every local of a recovery attempt back to its initial value, rPhase "aborted" (a retry starts over).
AbortAttempt(c) ==
    /\ rPhase' = [rPhase EXCEPT ![c] = "aborted"]
    /\ rAnswered' = [rAnswered EXCEPT ![c] = {}]
    /\ rMaxLac' = [rMaxLac EXCEPT ![c] = NoEntry]
    /\ rReadFragments' = [rReadFragments EXCEPT ![c] = <<>>]
    /\ rFragments' = [rFragments EXCEPT ![c] = <<>>]
    /\ rNext' = [rNext EXCEPT ![c] = 0]
    /\ rNegatives' = [rNegatives EXCEPT ![c] = {}]
    /\ rTried' = [rTried EXCEPT ![c] = 0]
    /\ rWbAcks' = [rWbAcks EXCEPT ![c] = [e \in Entries |-> {}]]
    /\ rWbSentLac' = [rWbSentLac EXCEPT ![c] = [e \in Entries |-> NoEntry]]
    /\ rWbLac' = [rWbLac EXCEPT ![c] = NoEntry]
    /\ rEnd' = [rEnd EXCEPT ![c] = NoEntry]
    /\ rLength' = [rLength EXCEPT ![c] = 0]

\* A recovery read answer for the entry being read. One OK: the entry exists: write it back to its
\* write set in the local (current) ensemble as a recovery add, go on with the next id. Enough
\* negatives: the entry cannot have been acknowledged: the end is the previous one. Too few: ask
\* the write set's next bookie; if all Qw were asked, the attempt fails.
RecoveryHandlesReadReply(m, req) ==
    /\ m.kind = "readResp" /\ m.client \in Recoverers
    /\ LET c == m.client
           e == m.entry
           current == rPhase[c] = "reading" /\ e = rNext[c] /\ m.bookie \in WriteSet(rReadFragments[c], e)
           negs == rNegatives[c] \cup {m.bookie}
       IN /\ IF current /\ m.val = 0 /\ Cardinality(negs) < NegativeThreshold /\ rTried[c] = Qw
             THEN /\ msgs' = msgs \ {req}   \* all Qw asked: neither found nor ruled out, the attempt fails
                  /\ AbortAttempt(c)
             ELSE /\ UNCHANGED <<rAnswered, rMaxLac, rReadFragments, rFragments, rWbAcks, rWbLac>>
                  /\ IF current /\ m.val = 1
                     THEN /\ rNext' = [rNext EXCEPT ![c] = e + 1]
                          /\ rNegatives' = [rNegatives EXCEPT ![c] = {}]
                          /\ rWbSentLac' = [rWbSentLac EXCEPT ![c][e] = rWbLac[c]]
                          /\ rLength' = [rLength EXCEPT ![c] = LengthAt(e)]   \* the entry's own header
                          /\ Sends(msgs \ {req},
                                    {Msg("recoveryAdd", c, b, e, rWbLac[c]) :
                                     b \in WriteSetIn(LastEnsemble(rFragments[c]), e)}
                                    \cup ReadAt(c, e + 1, 0))
                          /\ rTried' = [rTried EXCEPT ![c] = 1]
                          /\ UNCHANGED <<rPhase, rEnd>>
                     ELSE IF current /\ Cardinality(negs) >= NegativeThreshold
                     THEN /\ rPhase' = [rPhase EXCEPT ![c] = "closing"]
                          /\ rEnd' = [rEnd EXCEPT ![c] = e - 1]
                          /\ rNegatives' = [rNegatives EXCEPT ![c] = {}]   \* dead from now on
                          /\ rTried' = [rTried EXCEPT ![c] = 0]
                          /\ msgs' = msgs \ {req}
                          /\ UNCHANGED <<rNext, rWbSentLac, rLength>>
                     ELSE IF current   \* not enough negatives yet: ask the write set's next bookie
                     THEN /\ rNegatives' = [rNegatives EXCEPT ![c] = negs]
                          /\ Sends(msgs \ {req}, ReadAt(c, e, rTried[c]))
                          /\ rTried' = [rTried EXCEPT ![c] = @ + 1]
                          /\ UNCHANGED <<rPhase, rEnd, rNext, rWbSentLac, rLength>>
                     ELSE /\ msgs' = msgs \ {req}
                          /\ UNCHANGED <<rPhase, rEnd, rNext, rNegatives, rWbSentLac, rLength, rTried>>
          /\ lastAction' = [name |-> "RecoveryReceivesReadResponse",
                            params |-> [client |-> c, bookie |-> m.bookie, entry |-> e, found |-> m.val = 1,
                                        stale |-> ~current]]
    /\ UNCHANGED <<meta, up, failed, writerVars, lost, crashes>>

\* The write-back in progress: entries rWbLac+1 .. (last one sent) are pending.
WbPushed(c) == IF rPhase[c] = "closing" THEN rEnd[c] ELSE rNext[c] - 1

\* A recovery add response (fenced bookies accept recovery adds, so it is OK).
RecoveryHandlesAddReply(m, req) ==
    /\ m.kind = "addResp" /\ m.client \in Recoverers
    /\ msgs' = msgs \ {req}
    /\ LET c == m.client
           e == m.entry
           counts == rPhase[c] \in {"reading", "closing"} /\ m.val = 1 /\ rWbLac[c] < e /\ e <= WbPushed(c)
                     /\ m.bookie \in WriteSetIn(LastEnsemble(rFragments[c]), e)
           acks == [rWbAcks[c] EXCEPT ![e] = @ \cup {m.bookie}]
           lac == ConfirmedUpTo(acks, rWbLac[c], WbPushed(c))
       IN /\ IF counts
             THEN /\ rWbLac' = [rWbLac EXCEPT ![c] = lac]
                  /\ rWbAcks' = [rWbAcks EXCEPT ![c] = [x \in Entries |-> IF x <= lac THEN {} ELSE acks[x]]]
                  /\ rWbSentLac' = [rWbSentLac EXCEPT ![c] = [x \in Entries |-> IF x <= lac THEN NoEntry
                                                                                  ELSE rWbSentLac[c][x]]]
             ELSE UNCHANGED <<rWbLac, rWbAcks, rWbSentLac>>
          /\ lastAction' = [name |-> "RecoveryReceivesAddResponse",
                            params |-> [client |-> c, bookie |-> m.bookie, entry |-> e, counted |-> counts]]
    /\ UNCHANGED <<meta, up, failed, writerVars, rPhase, rAnswered, rMaxLac, rReadFragments, rFragments,
                   rNext, rNegatives, rTried, rEnd, rLength, lost, crashes>>

\* A recovery read that got no answer (the request or its reply lost, or its bookie down): with
\* nothing about rNext in flight, ask the next bookie of the write set (sequential reads).
RecoveryReadTimedOut(c) ==
    /\ rPhase[c] = "reading" /\ rTried[c] < Qw
    /\ \A b \in Bookies : ~InFlight("read", c, b, rNext[c]) /\ ~InFlight("readResp", c, b, rNext[c])
    /\ Sends(msgs, ReadAt(c, rNext[c], rTried[c]))
    /\ rTried' = [rTried EXCEPT ![c] = @ + 1]
    /\ lastAction' = [name |-> "RecoveryReadTimedOut", params |-> [client |-> c, entry |-> rNext[c]]]
    /\ UNCHANGED <<meta, bookieVars, writerVars, rPhase, rAnswered, rMaxLac, rReadFragments, rFragments, rNext,
                   rNegatives, rWbAcks, rWbSentLac, rWbLac, rEnd, rLength, lost, crashes>>

RecoveryAddTimedOut(c, b, e) ==
    /\ rPhase[c] \in {"reading", "closing"}
    /\ rWbLac[c] < e /\ e <= WbPushed(c)
    /\ b \in WriteSetIn(LastEnsemble(rFragments[c]), e) /\ b \notin rWbAcks[c][e]
    /\ Cardinality(rWbAcks[c][e]) < Qa
    /\ ~InFlight("recoveryAdd", c, b, e) /\ ~InFlight("addResp", c, b, e)

\* A local ensemble change during write-back: kept in rFragments until the final close. Pending
\* recovery adds are re-sent to nb with the LAC they were first sent with (as the writer's).
RecoveryChangesEnsemble(c, b, nb) ==
    /\ rPhase[c] \in {"reading", "closing"}
    /\ b # nb /\ up[nb]
    /\ ~InSeq(LastEnsemble(rFragments[c]), nb)
    /\ InSeq(LastEnsemble(rFragments[c]), b)
    /\ \E e \in Entries : RecoveryAddTimedOut(c, b, e)
    /\ LET frags == ReplaceBookie(rFragments[c], b, nb, rWbLac[c] + 1) IN
       /\ Len(frags) <= MaxFragments
       /\ rFragments' = [rFragments EXCEPT ![c] = frags]
       /\ rWbAcks' = [rWbAcks EXCEPT ![c] = [e \in Entries |-> @[e] \ {b}]]
       /\ msgs' = msgs \cup {Msg("recoveryAdd", c, nb, e, rWbSentLac[c][e]) :
                             e \in {x \in rWbLac[c] + 1 .. WbPushed(c) : nb \in WriteSetIn(LastEnsemble(frags), x)}}
    /\ lastAction' = [name |-> "RecoveryChangesEnsemble",
                      params |-> [client |-> c, failed |-> b, replacement |-> nb, first |-> rWbLac[c] + 1]]
    /\ UNCHANGED <<meta, bookieVars, writerVars, rPhase, rAnswered, rMaxLac, rReadFragments, rNext,
                   rNegatives, rTried, rWbSentLac, rWbLac, rEnd, rLength, lost, crashes>>

\* Recovery close by CW once every write-back finished: IN_RECOVERY -> CLOSED with the recovered
\* end, its length and the local fragments; if someone else CLOSED it, adopt that (closeRecovered:
\* no comparison). Note: when no entry past the start point was read, the length is the read-LAC's,
\* which need not be the length at the end (BookKeeper's own behaviour, kept; see spec/ledger.md).
RecoveryCloses(c) ==
    /\ rPhase[c] = "closing"
    /\ CASE Mutation = "close_before_write_back" -> TRUE
         [] Mutation = "write_back_never_done" -> rWbLac[c] > rEnd[c]
         [] OTHER -> rWbLac[c] >= rEnd[c]
    /\ IF meta.state = "IN_RECOVERY"
       THEN /\ meta' = [state |-> "CLOSED", lastEntry |-> rEnd[c], length |-> rLength[c],
                         fragments |-> rFragments[c]]
            /\ UNCHANGED rEnd
       ELSE /\ rEnd' = [rEnd EXCEPT ![c] = meta.lastEntry]   \* adopt (state is CLOSED)
            /\ UNCHANGED meta
    /\ rPhase' = [rPhase EXCEPT ![c] = "done"]
    /\ lastAction' = [name |-> "RecoveryCloses",
                      params |-> [client |-> c, lastEntry |-> rEnd[c], outcome |-> meta.state]]
    /\ UNCHANGED <<bookieVars, msgs, writerVars, rAnswered, rMaxLac, rReadFragments, rFragments, rNext,
                   rNegatives, rTried, rWbAcks, rWbSentLac, rWbLac, rLength, lost, crashes>>

\* Recovery fails (and may be retried): fencing cannot be covered, the entry being read has
\* neither an OK nor enough negatives from all Qw bookies asked, or a write-back timed out; with
\* nothing more in flight.
\* The abort's condition is evaluated as one boolean (IF): as a conjunct of the action TLC would take
\* each disjunct and each timed-out (b, e) as a branch of its own and generate the same successor once
\* per branch. Same action, fewer duplicate successors.
RecoveryMayAbort(c) ==
    \/ /\ rPhase[c] = "fencing" /\ ~Covered(c)
       /\ \A b \in Bookies : ~InFlight("readLac", c, b, NoEntry) /\ ~InFlight("readLacResp", c, b, NoEntry)
    \/ /\ rPhase[c] = "reading" /\ rTried[c] = Qw
       /\ \A b \in Bookies : ~InFlight("read", c, b, rNext[c]) /\ ~InFlight("readResp", c, b, rNext[c])
    \/ \E b \in Bookies, e \in Entries : RecoveryAddTimedOut(c, b, e)
RecoveryAborts(c) ==
    IF RecoveryMayAbort(c)
    THEN /\ AbortAttempt(c)
         /\ lastAction' = [name |-> "RecoveryAborts", params |-> [client |-> c, phase |-> rPhase[c]]]
         /\ UNCHANGED <<meta, bookieVars, msgs, writerVars, lost, crashes>>
    ELSE FALSE

-----------------------------------------------------------------------------
(***************************************************************************)
(* Faults                                                                  *)
(***************************************************************************)

\* Issue 47: a recovery client may crash mid-attempt (a model sets CrashRecoverers = TRUE; the
\* definition keeps every other model's state space as it was). The crash counts against MaxCrashes.
\* Its in-memory attempt is gone (AbortAttempt: the restarted client is "aborted" and retries from
\* the metadata, under FairSpec's fairness on Recovering(c)); what it had sent still lands at the
\* bookies (fences, recovery adds), and the replies to the dead attempt are dropped as stale.
CrashRecoverers == FALSE
RecovererCrashes(c) ==
    /\ CrashRecoverers /\ crashes < MaxCrashes
    /\ rPhase[c] \in {"fencing", "reading", "closing"}
    /\ crashes' = crashes + 1
    /\ AbortAttempt(c)
    /\ lastAction' = [name |-> "RecovererCrashes", params |-> [client |-> c, phase |-> rPhase[c]]]
    /\ UNCHANGED <<meta, bookieVars, msgs, writerVars, lost>>

\* Which requests (and their replies) a lost message may be: every kind, unless a model narrows its fault
\* budget (LostKinds, a definition that a model's CONSTANTS may set; ledger_deep_large.cfg: the writer's adds).
LostKinds == Requests
\* A lost request: the sender sees a timeout.
LoseRequest(m) ==
    /\ SharedFate => up[m.bookie]   \* a request queued on a connection attempt is not on the wire
    /\ m.kind \in LostKinds
    /\ lost < MaxLostMessages
    /\ lost' = lost + 1
    /\ msgs' = msgs \ {m}
    /\ lastAction' = [name |-> "MessageLost", params |-> [kind |-> m.kind, client |-> m.client,
                                                          bookie |-> m.bookie, entry |-> m.entry]]
    /\ UNCHANGED <<meta, bookieVars, writerVars, recVars, crashes>>

\* A request to a bookie that is down gets no answer (not counted as a lost message: the crash is
\* the fault).
DropRequestToDownBookie(m) ==
    /\ ~SharedFate   \* with SharedFate a queued request fails with its attempt, in Sends
    /\ m.kind \in Requests /\ ~up[m.bookie]
    /\ msgs' = msgs \ {m}
    /\ lastAction' = [name |-> "RequestToDownBookieLost", params |-> [kind |-> m.kind, client |-> m.client,
                                                                      bookie |-> m.bookie, entry |-> m.entry]]
    /\ UNCHANGED <<meta, bookieVars, writerVars, recVars, lost, crashes>>

\* A crash keeps only journalled, fsynced state: entries, the fenced flag and the LAC (which rides
\* in entries) survive; requests queued at the bookie are lost. With JournalSyncData = FALSE the
\* journal's unsynced tail is lost too: b is back at its last sync (fences are always synced).
BookieCrashes(b) ==
    /\ up[b] /\ crashes < MaxCrashes
    /\ up' = [up EXCEPT ![b] = FALSE]
    /\ crashes' = crashes + 1
    /\ entries' = [entries EXCEPT ![b] = Durable(b).entries]
    /\ bookieLac' = [bookieLac EXCEPT ![b] = Durable(b).lac]
    /\ durableState' = Synced(b)
    /\ msgs' = {m \in msgs : ~(m.kind \in Requests /\ m.bookie = b)}
    /\ lastAction' = [name |-> "BookieCrashes", params |-> [bookie |-> b]]
    /\ UNCHANGED <<meta, fenced, failed, writerVars, recVars, lost>>

BookieRestarts(b) ==
    /\ ~up[b] /\ b \notin failed
    /\ up' = [up EXCEPT ![b] = TRUE]
    /\ lastAction' = [name |-> "BookieRestarts", params |-> [bookie |-> b]]
    /\ UNCHANGED <<meta, entries, fenced, bookieLac, durableState, failed, msgs, writerVars, recVars, lost,
                   crashes>>

\* JournalSyncData = FALSE only: a running bookie's journal is synced (it rolls, the operating system
\* writes its pages back): what it holds is durable from now on. Never enabled under the default.
BookieSyncs(b) ==
    /\ up[b] /\ durableState[b] # {}
    /\ durableState' = Synced(b)
    /\ lastAction' = [name |-> "BookieSyncs", params |-> [bookie |-> b]]
    /\ UNCHANGED <<meta, entries, fenced, bookieLac, up, failed, msgs, writerVars, recVars, lost, crashes>>

\* A bookie fails for good: it never answers again and its data is unreadable.
BookieFailsPermanently(b) ==
    /\ up[b] /\ Cardinality(failed) < MaxPermanentFailures
    /\ up' = [up EXCEPT ![b] = FALSE]
    /\ failed' = failed \cup {b}
    /\ msgs' = {m \in msgs : ~(m.kind \in Requests /\ m.bookie = b)}
    /\ lastAction' = [name |-> "BookieFailsPermanently", params |-> [bookie |-> b]]
    /\ UNCHANGED <<meta, entries, fenced, bookieLac, durableState, writerVars, recVars, lost, crashes>>

-----------------------------------------------------------------------------

\* Justified atomicity: a bookie handles a request and its reply reaches the client in one step
\* (each TLC step is "bookie b handled request m and client c handled the reply"). A reply that
\* is lost is ReplyLost. Assumption: the only client decisions that depend on a reply being
\* absent (timeouts, aborts) wait until nothing is in flight, so delaying a reply adds nothing
\* but the reorderings with independent steps; a close racing a late reply is the lost-reply case.
Delivered(req) == req.kind \in Requests /\ up[req.bookie] /\ BookieHandles(req)

DeliverAddToWriter(req) ==
    /\ req.kind \in {"add", "recoveryAdd"} /\ req.client = Writer
    /\ Delivered(req) /\ WriterHandlesAddReply(Reply(req), req)
DeliverAddToRecoverer(req) ==
    /\ req.kind \in {"add", "recoveryAdd"} /\ req.client \in Recoverers
    /\ Delivered(req) /\ RecoveryHandlesAddReply(Reply(req), req)
DeliverReadLac(req) == req.kind = "readLac" /\ Delivered(req) /\ RecoveryHandlesReadLacReply(Reply(req), req)
DeliverRead(req) == req.kind = "read" /\ Delivered(req) /\ RecoveryHandlesReadReply(Reply(req), req)

DeliverMessage(m) ==
    \/ DeliverAddToWriter(m) \/ DeliverAddToRecoverer(m) \/ DeliverReadLac(m) \/ DeliverRead(m)

\* The bookie handled the request but its reply was lost: the client sees a timeout.
LoseReply(m) ==
    /\ m.kind \in Requests /\ up[m.bookie]
    /\ m.kind \in LostKinds
    /\ lost < MaxLostMessages
    /\ lost' = lost + 1
    /\ BookieHandles(m)
    /\ msgs' = msgs \ {m}
    /\ lastAction' = [name |-> "ReplyLost", params |-> [kind |-> m.kind, client |-> m.client,
                                                        bookie |-> m.bookie, entry |-> m.entry]]
    /\ UNCHANGED <<meta, up, failed, writerVars, recVars, crashes>>

\* The actions that pick a message. TLC splits an action into named sub-actions only over
\* constant sets; a choice of message from the variable msgs is wrapped in an action of the
\* same name as its lastAction, so TLC's action names in a trace match lastAction.name.
WriterReceivesAddResponse == \E m \in msgs : DeliverAddToWriter(m)
RecoveryReceivesAddResponse == \E m \in msgs : DeliverAddToRecoverer(m)
RecoveryReceivesReadLacResponse == \E m \in msgs : DeliverReadLac(m)
RecoveryReceivesReadResponse == \E m \in msgs : DeliverRead(m)
\* The budget tests (also inside each step) come first so that TLC does not scan msgs when they fail.
RequestToDownBookieLost == ~SharedFate /\ \E m \in msgs : DropRequestToDownBookie(m)
MessageLost == lost < MaxLostMessages /\ \E m \in msgs : LoseRequest(m)
ReplyLost == lost < MaxLostMessages /\ \E m \in msgs : LoseReply(m)

Writing ==
    \/ WriterSendsAdd \/ WriterCloses
    \/ \E b, nb \in Bookies : WriterChangesEnsemble(b, nb)

Recovering(c) ==
    \/ RecoveryStarts(c) \/ RecoveryCloses(c) \/ RecoveryAborts(c) \/ RecoveryReadTimedOut(c)
    \/ \E b, nb \in Bookies : RecoveryChangesEnsemble(c, b, nb)

Faults ==
    \/ MessageLost \/ ReplyLost
    \/ \E b \in Bookies : BookieCrashes(b) \/ BookieFailsPermanently(b)
    \/ \E c \in Recoverers : RecovererCrashes(c)

Next ==
    \/ WriterReceivesAddResponse \/ RecoveryReceivesAddResponse
    \/ RecoveryReceivesReadLacResponse \/ RecoveryReceivesReadResponse
    \/ RequestToDownBookieLost
    \/ Writing
    \/ \E c \in Recoverers : Recovering(c)
    \/ \E b \in Bookies : BookieRestarts(b) \/ BookieSyncs(b)
    \/ Faults

Spec == Init /\ [][Next]_vars

\* Weak fairness on everything but faults and the writer (which may stop at any time, as a
\* crashed client does): once messages stop being lost, messages get delivered, crashed bookies
\* restart and recovery clients keep trying.
FairSpec ==
    /\ Spec
    /\ \A c \in Clients, b \in Bookies : WF_vars(\E m \in msgs : m.bookie = b /\ m.client = c /\ (DeliverMessage(m) \/ DropRequestToDownBookie(m)))
    /\ \A c \in Recoverers : WF_vars(Recovering(c))
    /\ \A b \in Bookies : WF_vars(BookieRestarts(b))

-----------------------------------------------------------------------------
(***************************************************************************)
(* Invariants                                                              *)
(***************************************************************************)

TypeOK ==
    /\ meta.state \in {"OPEN", "IN_RECOVERY", "CLOSED"}
    /\ meta.lastEntry \in Entries \cup {NoEntry}
    /\ meta.length \in 0 .. NumEntries
    /\ entries \in [Bookies -> SUBSET Entries]
    /\ fenced \in [Bookies -> BOOLEAN]
    /\ bookieLac \in [Bookies -> Entries \cup {NoEntry}]
    /\ \A b \in Bookies : durableState[b] \subseteq [entries : SUBSET Entries, lac : Entries \cup {NoEntry}]
                          /\ Cardinality(durableState[b]) <= 1
                          /\ JournalSyncData => durableState[b] = {}
    /\ up \in [Bookies -> BOOLEAN] /\ failed \subseteq Bookies
    /\ wState \in {"WRITING", "CLOSED", "FENCED", "FAILED"}
    /\ wPushed \in Entries \cup {NoEntry} /\ wLac \in Entries \cup {NoEntry} /\ wLac <= wPushed
    /\ wAcks \in [Entries -> SUBSET Bookies]
    /\ wSentLac \in [Entries -> Entries \cup {NoEntry}]
    /\ rWbSentLac \in [Recoverers -> [Entries -> Entries \cup {NoEntry}]]
    /\ rPhase \in [Recoverers -> {"idle", "fencing", "reading", "closing", "done", "aborted"}]
    /\ rNext \in [Recoverers -> 0 .. NumEntries]
    /\ rTried \in [Recoverers -> 0 .. Qw]
    /\ rLength \in [Recoverers -> 0 .. NumEntries]
    /\ \A m \in msgs : m.kind \in Requests \cup {"addResp", "readLacResp", "readResp"}
                       /\ m.client \in Clients /\ m.bookie \in Bookies
    /\ lost \in 0 .. MaxLostMessages /\ crashes \in 0 .. MaxCrashes

StoredOn(frags, e) == { b \in WriteSet(frags, e) : e \in entries[b] }

\* No divergence: no entry acknowledged to the writer's application lies beyond the closed end;
\* a writer that closed, and every recovery client that finished, agree with the metadata's end.
NoDivergence ==
    /\ meta.state = "CLOSED" => wLac <= meta.lastEntry
    /\ wState = "CLOSED" => meta.state = "CLOSED" /\ meta.lastEntry = wLac
    /\ \A c \in Recoverers : rPhase[c] = "done" => meta.state = "CLOSED" /\ rEnd[c] = meta.lastEntry

\* Every entry acknowledged to a client is readable through the metadata's fragments: some
\* bookie of its write set (per the metadata) that has not failed for good stores it.
\* (Models with Qa = 1 set MaxPermanentFailures = 0: one copy cannot survive a lost disk.)
AckedEntriesReadable ==
    \A e \in 0 .. wLac : \E b \in StoredOn(meta.fragments, e) : b \notin failed

\* Every entry of a closed ledger reached Qa bookies of its write set (per the closed metadata).
ClosedEntriesReplicated ==
    meta.state = "CLOSED" =>
        \A e \in 0 .. meta.lastEntry : Cardinality(StoredOn(meta.fragments, e)) >= Qa

\* No out-of-order entries: the writer confirms an entry only after every earlier one, so each
\* entry up to its LAC reached Qa bookies of its write set (a gap would be an entry confirmed out
\* of order).
InOrderConfirmation ==
    \A e \in 0 .. wLac : Cardinality(StoredOn(wFragments, e)) >= Qa

\* Only valid fragments: the first starts at entry 0, first ids strictly increase, each ensemble
\* has E distinct bookies, and a closed ledger's last fragment starts at most one past its end.
ValidFragments ==
    LET f == meta.fragments IN
    /\ Len(f) \in 1 .. MaxFragments
    /\ f[1].first = 0
    /\ \A i \in 1 .. Len(f) - 1 : f[i].first < f[i + 1].first
    /\ \A i \in 1 .. Len(f) : Cardinality(Range(f[i].ens)) = E
    /\ meta.state = "CLOSED" => f[Len(f)].first <= meta.lastEntry + 1

\* The closed length (meta.length) is the length some entry's header carries, or 0 (no header): the
\* writer's close takes its LAC's, a recovery's the read-LAC's or the last entry it read (decision 1 in
\* spec/ledger.md). It need not be the length at the closed end: WitnessClosedLengthAtEnd.
ClosedLengthFromAHeader ==
    meta.state = "CLOSED" => meta.length = 0 \/ \E b \in Bookies : meta.length - 1 \in entries[b]

\* Witness (expected violated by ledger-witness-closedlength-ci): a recovery that reads nothing past
\* its start point closes with the read-LAC's length, which can differ from the length at its end
\* (BookKeeper's LedgerRecoveryOp does the same). A writer close at that end then fails (decision 4).
WitnessClosedLengthAtEnd == meta.state = "CLOSED" => meta.length = LengthAt(meta.lastEntry)

\* What the fencing read-LAC's coverage rule gives: from a recovery attempt's first read on, no write
\* set of the ensemble it fenced has Qa unfenced bookies, so an add the old writer sends from then on
\* cannot reach Qa (one stored on a bookie before its fence still can: the LAC can move). Safety does
\* not depend on it (spec/ledger.md, "The read-LAC coverage rule"): mutation read_lac_one_answer
\* violates only this.
FencedBeforeReading ==
    \A c \in Recoverers :
        rPhase[c] \in {"reading", "closing"} =>
            \A ws \in AllWriteSets(LastEnsemble(rReadFragments[c])) : Cardinality({b \in ws : ~fenced[b]}) < Qa

\* Witness (expected violated by ledger-witness-lacmoves-ci): the claim fencing.tla's header used to
\* rest on, "once a recoverer is reading, the writer's LAC never moves", is false: an entry stored on
\* one bookie before its fence reaches Qa on another afterwards. AtomicLedgerSteps is what holds.
WitnessLacFrozenWhileRecovering ==
    [][(\E c \in Recoverers : rPhase[c] \in {"reading", "closing"}) => wLac' = wLac]_wLac

\* A closed ledger never changes (action property).
ClosedLedgerNeverChanges == [][meta.state = "CLOSED" => meta' = meta]_meta

\* Refinement: ledger.tla implements the atomic ledger of atomic_ledger.tla (the abstraction fencing.tla
\* uses). The ledger is CLOSED once the metadata is; its end is the closed metadata's last entry; the
\* writer's sends and LAC are pushed and lac; what a reader reads is the entries at or below the end
\* (the LAC while open) that Qa bookies of their write set store, per the closed metadata (the
\* writer's fragments while open). TLC checks AtomicLedgerInit and AtomicLedgerSteps as properties:
\* every step of ledger.tla is a step of the atomic ledger or leaves its variables unchanged.
\* The atomic ledger's Init and Next are written out here over the mapped variables, with the same
\* names and in the same words as atomic_ledger.tla, because trace validation and simulation copy
\* ledger.tla alone; spec/ledger_refines_atomic.tla checks by INSTANCE that they are the module's
\* (tests/spec/test_tlc_models.py runs it).
AtomicClosed == meta.state = "CLOSED"
AtomicTop == IF AtomicClosed THEN meta.lastEntry ELSE wLac
AtomicFragments == IF AtomicClosed THEN meta.fragments ELSE wFragments
\* the mapped variables: state, pushed, lac, end, content
AState == IF AtomicClosed THEN "CLOSED" ELSE "OPEN"
AEnd == IF AtomicClosed THEN meta.lastEntry ELSE NoEntry
AContent == {e \in 0 .. AtomicTop : Cardinality(StoredOn(AtomicFragments, e)) >= Qa}
atomicVars == <<AState, wPushed, wLac, AEnd, AContent>>
AtomicInit ==
    /\ AState = "OPEN"
    /\ wPushed = NoEntry
    /\ wLac = NoEntry
    /\ AEnd = NoEntry
    /\ AContent = {}
AtomicPush ==
    /\ wPushed < NumEntries - 1
    /\ wPushed' = wPushed + 1
    /\ UNCHANGED <<AState, wLac, AEnd, AContent>>
AtomicConfirm(n) ==
    /\ n \in wLac + 1 .. wPushed
    /\ AState = "CLOSED" => n <= AEnd
    /\ wLac' = n
    /\ AContent' = IF AState = "OPEN" THEN 0 .. n ELSE AContent
    /\ UNCHANGED <<AState, wPushed, AEnd>>
AtomicClose(e) ==
    /\ AState = "OPEN"
    /\ e \in wLac .. wPushed
    /\ AState' = "CLOSED"
    /\ AEnd' = e
    /\ AContent' = 0 .. e
    /\ UNCHANGED <<wPushed, wLac>>
AtomicNext == AtomicPush \/ (\E n \in Entries : AtomicConfirm(n)) \/ (\E e \in Entries \cup {NoEntry} : AtomicClose(e))
\* atomic_ledger.tla's Spec in two properties (TLC names a violated action property only when it is
\* one [][A]_v):
AtomicLedgerInit == AtomicInit
AtomicLedgerSteps == [][AtomicNext]_atomicVars

\* Liveness: under FairSpec, some recovery client eventually finishes, the ledger is closed and
\* that client agrees with its end (NoDivergence makes every other client agree too).
RecoveryTerminates ==
    <>(meta.state = "CLOSED" /\ \E c \in Recoverers : rPhase[c] = "done" /\ rEnd[c] = meta.lastEntry)

-----------------------------------------------------------------------------
(***************************************************************************)
(* deepView: a coarser fingerprint for the deep models only (the ci      *)
(* models keep `view`: the conformance replay needs every state of their *)
(* graphs as it is). TLC checks invariants only on the first state of a   *)
(* fingerprint and explores only its successors, so two states may share *)
(* one only if (a) every invariant has the same value in both and (b)     *)
(* whatever one can reach, the other can reach up to states that again    *)
(* share a fingerprint or are at least as constrained. spec/ledger.md     *)
(* ("Reductions and what each assumes") gives the argument per invariant. *)
(***************************************************************************)

\* Quiescence. Once the ledger is CLOSED, the writer can no longer move its LAC (it stopped, or it
\* has confirmed its last possible entry and can only close, which succeeds exactly when the
\* metadata's end is its LAC) and no more disks can be lost, nothing any invariant reads can change
\* except `entries`, which only grows: meta is final (every metadata write needs OPEN/IN_RECOVERY or
\* a running writer), wLac, wState's verdict, wFragments and failed are fixed, and a recovery client
\* either is done or can only end by adopting the closed end (RecoveryStarts and RecoveryCloses on
\* a CLOSED ledger). Every invariant is monotone in `entries` (more copies never falsify one), so a
\* quiescent state where all invariants hold has a future where they all hold and the action
\* property cannot fire (meta never changes again): all such states are one. The invariants are
\* part of the test, so a quiescent state that violates one keeps its own fingerprint.
WriterCannotConfirmMore == wState # "WRITING" \/ (wLac = wPushed /\ wPushed = NumEntries - 1)
SafeForever ==
    /\ JournalSyncData   \* else a crash can still take entries away
    /\ meta.state = "CLOSED"
    /\ WriterCannotConfirmMore
    /\ Cardinality(failed) >= MaxPermanentFailures
    /\ TypeOK /\ NoDivergence /\ AckedEntriesReadable /\ ClosedEntriesReplicated
    /\ InOrderConfirmation /\ ValidFragments

\* Dead state (the Stopped argument applied in the fingerprint instead of the actions): a value
\* nothing reads again is replaced by a constant, so states differing only in it are one.
WriterStopped == wState # "WRITING"
\* bookieLac is read only by a read-LAC answer, and only a client in "fencing" uses one. On a
\* CLOSED ledger no client is fencing and one idle or aborted can only adopt the close.
LacDead == meta.state = "CLOSED" /\ \A c \in Recoverers : rPhase[c] \in {"idle", "aborted", "done"}
\* A request whose delivery changes nothing that is read again, whose reply is ignored, and whose
\* presence in msgs blocks no step its twin without it could take: NoMessagesOf is read only in
\* idle/aborted and the InFlight tests only for a fencing client's read-LACs, a reading client's
\* current entry and pending adds. (Blocking matters: TLC never expands the twin, so the first state
\* of a fingerprint must be able to take every step of the others. Losing such a request only
\* spends budget, which leaves fewer behaviours.) Each case stays dead while it is one: fenced flags,
\* a stopped writer, "done", a CLOSED ledger, stored entries and a higher rNext are final; a client
\* that aborts makes its stale reads live again (they block its retry), and then they count again.
\*   read/readLac of a client reading (another entry), closing or done, to a fenced bookie:
\*     fencing again is a no-op and the answer is stale;
\*   a stopped writer's add to a fenced bookie: rejected, no change;
\*   an add (a stopped writer's, or a done client's) of an entry the bookie stores, once the LAC
\*     header is dead: entries unchanged, only bookieLac moves.
\* With SharedFate a request queued on a connection attempt to a down bookie is dead on the same
\* terms (it is handled, if at all, by the restarted bookie, as one on the wire; it cannot be lost
\* alone, which only leaves fewer behaviours), but its presence says one more thing: that its client
\* has an attempt pending to that bookie, so the client's next request there joins it and cannot
\* fail on its own (Queued). QueueMarks keeps that in the fingerprint: one mark per client and down
\* bookie with anything queued, whether the requests are dead or live.
DeadRequest(m) ==
    CASE m.kind \in {"read", "readLac"} ->
                 /\ fenced[m.bookie]
                 /\ rPhase[m.client] \in {"reading", "closing", "done"}
                 /\ ~(m.kind = "read" /\ rPhase[m.client] = "reading" /\ m.entry = rNext[m.client])
         [] m.kind = "add" ->
                 WriterStopped /\ (fenced[m.bookie] \/ (m.entry \in entries[m.bookie] /\ LacDead))
         [] m.kind = "recoveryAdd" ->
                 rPhase[m.client] = "done" /\ m.entry \in entries[m.bookie] /\ LacDead
         [] OTHER -> FALSE
\* (With every bookie up nothing is queued: the test only spares TLC the scan of msgs.)
QueueMarks == IF SharedFate /\ \E b \in Bookies : ~up[b] THEN {<<m.client, m.bookie>> : m \in {q \in msgs : ~up[q.bookie]}} ELSE {}
\* The fenced flags are read only when a writer add is delivered: dead once the writer stopped (it
\* sends no more) and every add of it still in flight is dead.
FencedDead == WriterStopped /\ \A m \in msgs : m.kind = "add" => DeadRequest(m)
\* A done client's locals other than rEnd are read by nothing (every handler tests the phase first);
\* a stopped writer's wPushed likewise (wLac and wFragments stay: invariants read them).
\* With no bookie outside the ensemble (E = all bookies) no ensemble change can happen, since a
\* replacement must be outside it. Then a pending entry's ack set is read only through "fewer than
\* Qa?" and "is b in it?" while it is short of Qa (completion, EFENCED, timeouts), so a set that
\* reached Qa is as good as any other such set; and the LAC a pending add was first sent with is
\* read only by the re-send of an ensemble change, so it is dead.
NoSpareBookie == Cardinality(Bookies) = E
\* (When no entry has Qa acks the collapse changes nothing: acks itself is the same value, cheaper.)
AcksView(acks) == IF NoSpareBookie /\ \E e \in Entries : Cardinality(acks[e]) >= Qa
                  THEN [e \in Entries |-> IF Cardinality(acks[e]) >= Qa THEN {"Qa reached"} ELSE acks[e]]
                  ELSE acks
SentLacView(sent) == IF NoSpareBookie THEN NoLacs ELSE sent
\* The parts below are written for TLC's speed (the VIEW is evaluated on every generated state); each
\* gives the same partition of states as the plain form (spec/ledger.md, "Reductions and what each
\* assumes", deepView, "evaluated cheaply"): constants computed once; the recovery clients' locals as
\* whole variables (a tuple of functions instead of a function of tuples: the same information) while
\* no client is done, the per-client form (a done client keeps only rEnd) otherwise, the two forms
\* told apart by their shape.
NoFences == [b \in Bookies |-> FALSE]
NoBookieLacs == [b \in Bookies |-> NoEntry]
RecoverersView ==
    IF \A c \in Recoverers : rPhase[c] # "done"
    THEN <<"none done", rPhase, rAnswered, rMaxLac, rReadFragments, rFragments, rNext, rNegatives, rTried,
           IF NoSpareBookie /\ \E c \in Recoverers, e \in Entries : Cardinality(rWbAcks[c][e]) >= Qa
           THEN [c \in Recoverers |-> AcksView(rWbAcks[c])] ELSE rWbAcks,
           IF NoSpareBookie THEN "dead" ELSE rWbSentLac, rWbLac, rEnd, rLength>>
    ELSE [c \in Recoverers |->
              IF rPhase[c] = "done" THEN <<rEnd[c]>>
              ELSE <<rPhase[c], rAnswered[c], rMaxLac[c], rReadFragments[c], rFragments[c], rNext[c],
                     rNegatives[c], rTried[c], AcksView(rWbAcks[c]), SentLacView(rWbSentLac[c]), rWbLac[c], rEnd[c],
                     rLength[c]>>]
deadView ==
    << meta, entries,
       IF FencedDead THEN NoFences ELSE fenced,
       IF LacDead THEN NoBookieLacs ELSE bookieLac,
       durableState, up, failed,
       {m \in msgs : ~DeadRequest(m)}, QueueMarks,
       wState, IF WriterStopped THEN NoEntry ELSE wPushed, wLac, AcksView(wAcks), SentLacView(wSentLac),
       wFragments,
       RecoverersView,
       lost, crashes >>

deepView == IF SafeForever THEN <<"safe forever">> ELSE deadView

\* Symmetry: bookies are interchangeable (Init picks any ensemble; nothing CHOOSEs a bookie).
BookieSymmetry == Permutations(Bookies)
\* Recovery clients are interchangeable too (each runs the same code from "idle"): for the deep models
\* with two of them (the conformance replay re-chooses bookies only, so the ci models keep BookieSymmetry).
BookieAndRecovererSymmetry == Permutations(Bookies) \cup Permutations(Recoverers)
=============================================================================
