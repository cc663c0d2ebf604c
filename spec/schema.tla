-------------------------------- MODULE schema --------------------------------
(***************************************************************************)
(* The schema registry's conditional writes (issue 44, item 7).            *)
(*                                                                         *)
(* Each schema version is the single entry of its own ledger, written and  *)
(* closed before anything points at it; the topic's locator (a metadata    *)
(* node: the list of versions, each a ledger and the schema's hash) changes *)
(* only by a conditional write: create when absent, set at the node        *)
(* version read.  A registration reads the locator; a schema already in it *)
(* is that version; otherwise the broker writes a ledger, then the locator.*)
(* The loser of a race deletes its ledger and reads again.  The client     *)
(* gets its answer in a step of its own after the write.                   *)
(*                                                                         *)
(* Registrations come two ways: through the topic (a producer, GET_OR_     *)
(* CREATE_SCHEMA), only on a broker that has the topic loaded, and through *)
(* the admin API, on any broker.  Ownership is the ephemeral node of a     *)
(* broker's metadata session; a session expires (its node goes, its       *)
(* writes fail SessionExpired) and the broker renews it, dropping its      *)
(* topics and in-flight work; a crash does the same at once, possibly      *)
(* between the ledger and the locator write.                               *)
(*                                                                         *)
(* Properties, over ghost variables: `answered` (every version the         *)
(* registry answered a client, with its schema) and `stray` (versions      *)
(* added through a topic by a broker that did not own it at the write).    *)
(*                                                                         *)
(* Mutation (one CONSTANT, so the text shows where each bug lives):        *)
(*   "blind_write"          the locator is set without the version read    *)
(*   "create_overwrites"    the first version's create overwrites a node   *)
(*                          that exists (no NodeExists check)              *)
(*   "cached_after_loss"    after renewing its session the broker keeps    *)
(*                          the topic and its cached read of the locator,  *)
(*                          and finishes its registration on the new one   *)
(*   "locator_before_entry" the locator is written first, naming a ledger  *)
(*                          whose entry is written afterwards              *)
(* Every action sets `lastAction` (outside the VIEW).  See spec/schema.md. *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Brokers,        \* model values
    Schemas,        \* distinct schema definitions (model values)
    NumLedgers,     \* ledger ids 1..NumLedgers: bounds the registrations attempted
    MaxExpiries,    \* session expiries
    MaxCrashes,     \* broker crashes (a crash also ends the session)
    Mutation        \* "none" or one of the mutations above

NoOwner == "none"
Absent == -1        \* locVersion of a locator node that does not exist
Free == "free"      \* a ledger id not created yet
Empty == "empty"    \* created, entry not written (only "locator_before_entry")
Deleted == "deleted"
Kinds == {"topic", "admin"}

VARIABLES
    locIndex,       \* the locator: sequence of [ledger, schema]; version i is position i
    locVersion,     \* the locator node's version (Absent: no node)
    ledgers,        \* ledger id -> Free | Empty | Deleted | a schema (written and closed)
    nextLedger,     \* the next ledger id
    owner,          \* the broker whose session holds the ownership node, or NoOwner
    ownerSession,   \* that session's id
    session,        \* broker -> its current session id
    alive,          \* broker -> its current session is alive
    loaded,         \* broker -> it has the topic loaded (believes it owns it)
    reg,            \* broker -> its registration in flight
    expiries, crashes,
    answered,       \* ghost: <<version, schema>> answered to clients
    stray,          \* ghost: versions added through a topic by a broker not owning it at the write
    lastAction

vars == <<locIndex, locVersion, ledgers, nextLedger, owner, ownerSession, session, alive, loaded,
          reg, expiries, crashes, answered, stray, lastAction>>
view == <<locIndex, locVersion, ledgers, nextLedger, owner, ownerSession, session, alive, loaded,
          reg, expiries, crashes, answered, stray>>

Idle == [phase |-> "idle", kind |-> "admin", schema |-> NoOwner, index |-> <<>>,
         version |-> Absent, ledger |-> 0, answer |-> 0]

Owns(b) == owner = b /\ ownerSession = session[b]
Positions(s, idx) == {i \in DOMAIN idx : idx[i].schema = s}

Init ==
    /\ locIndex = <<>>
    /\ locVersion = Absent
    /\ ledgers = [l \in 1..NumLedgers |-> Free]
    /\ nextLedger = 1
    /\ owner = NoOwner
    /\ ownerSession = 0
    /\ session = [b \in Brokers |-> 1]
    /\ alive = [b \in Brokers |-> TRUE]
    /\ loaded = [b \in Brokers |-> FALSE]
    /\ reg = [b \in Brokers |-> Idle]
    /\ expiries = 0
    /\ crashes = 0
    /\ answered = {}
    /\ stray = {}
    /\ lastAction = [name |-> "Init", params |-> [none |-> 0]]

TypeOK ==
    /\ locVersion \in {Absent} \cup Nat
    /\ \A i \in DOMAIN locIndex : locIndex[i].ledger \in 1..NumLedgers /\ locIndex[i].schema \in Schemas
    /\ ledgers \in [1..NumLedgers -> {Free, Empty, Deleted} \cup Schemas]
    /\ owner \in Brokers \cup {NoOwner}
    /\ \A b \in Brokers : reg[b].phase \in {"idle", "read", "written", "answer"}
    /\ answered \subseteq (Nat \X Schemas)

(* Take the topic (a lookup): create the ownership node on the live session. *)
Acquire(b) ==
    /\ owner = NoOwner /\ alive[b] /\ ~loaded[b]
    /\ owner' = b /\ ownerSession' = session[b] /\ loaded' = [loaded EXCEPT ![b] = TRUE]
    /\ lastAction' = [name |-> "Acquire", params |-> [broker |-> b, session |-> session[b]]]
    /\ UNCHANGED <<locIndex, locVersion, ledgers, nextLedger, session, alive, reg, expiries, crashes, answered, stray>>

(* The session expires: the ownership node goes; the broker is not told yet. *)
ExpireSession(b) ==
    /\ alive[b] /\ expiries < MaxExpiries
    /\ alive' = [alive EXCEPT ![b] = FALSE] /\ expiries' = expiries + 1
    /\ IF Owns(b) THEN owner' = NoOwner ELSE UNCHANGED owner
    /\ lastAction' = [name |-> "ExpireSession", params |-> [broker |-> b, session |-> session[b]]]
    /\ UNCHANGED <<locIndex, locVersion, ledgers, nextLedger, ownerSession, session, loaded, reg, crashes, answered, stray>>

(* The broker learns of the expiry and opens a new session: it drops its     *)
(* topics and the work of the old session (whose calls fail SessionExpired). *)
RenewSession(b) ==
    /\ ~alive[b]
    /\ alive' = [alive EXCEPT ![b] = TRUE] /\ session' = [session EXCEPT ![b] = @ + 1]
    /\ IF Mutation = "cached_after_loss"
       THEN UNCHANGED <<loaded, reg>>
       ELSE /\ loaded' = [loaded EXCEPT ![b] = FALSE]
            /\ reg' = [reg EXCEPT ![b] = Idle]
    /\ lastAction' = [name |-> "RenewSession", params |-> [broker |-> b, session |-> session[b] + 1]]
    /\ UNCHANGED <<locIndex, locVersion, ledgers, nextLedger, owner, ownerSession, expiries, crashes, answered, stray>>

(* A crash, anywhere (between the ledger and the locator too): the session  *)
(* ends, the restarted broker has a new one and nothing in flight.          *)
Crash(b) ==
    /\ crashes < MaxCrashes
    /\ crashes' = crashes + 1
    /\ IF Owns(b) THEN owner' = NoOwner ELSE UNCHANGED owner
    /\ alive' = [alive EXCEPT ![b] = TRUE] /\ session' = [session EXCEPT ![b] = @ + 1]
    /\ loaded' = [loaded EXCEPT ![b] = FALSE] /\ reg' = [reg EXCEPT ![b] = Idle]
    /\ lastAction' = [name |-> "Crash", params |-> [broker |-> b, phase |-> reg[b].phase, ledger |-> reg[b].ledger]]
    /\ UNCHANGED <<locIndex, locVersion, ledgers, nextLedger, ownerSession, expiries, answered, stray>>

(* Read the locator for schema s.  Through a topic only while it is loaded. *)
(* A schema already there is that version (answered next).                 *)
ReadLocator(b, s, kind) ==
    /\ reg[b].phase = "idle" /\ alive[b]
    /\ kind = "topic" => loaded[b]
    /\ LET found == Positions(s, locIndex) IN
       reg' = [reg EXCEPT ![b] =
                 [Idle EXCEPT !.phase = IF found = {} THEN "read" ELSE "answer",
                              !.kind = kind, !.schema = s, !.index = locIndex, !.version = locVersion,
                              !.answer = IF found = {} THEN 0 ELSE CHOOSE i \in found : TRUE]]
    /\ lastAction' = [name |-> "ReadLocator", params |-> [broker |-> b, schema |-> s, kind |-> kind,
                      version |-> locVersion, length |-> Len(locIndex)]]
    /\ UNCHANGED <<locIndex, locVersion, ledgers, nextLedger, owner, ownerSession, session, alive, loaded,
                   expiries, crashes, answered, stray>>

(* Create a ledger and write the schema as its single entry, then close it. *)
WriteEntry(b) ==
    /\ reg[b].phase = "read" /\ Mutation /= "locator_before_entry"
    /\ nextLedger <= NumLedgers
    /\ ledgers' = [ledgers EXCEPT ![nextLedger] = reg[b].schema]
    /\ nextLedger' = nextLedger + 1
    /\ reg' = [reg EXCEPT ![b].phase = "written", ![b].ledger = nextLedger]
    /\ lastAction' = [name |-> "WriteEntry", params |-> [broker |-> b, ledger |-> nextLedger, schema |-> reg[b].schema]]
    /\ UNCHANGED <<locIndex, locVersion, owner, ownerSession, session, alive, loaded, expiries, crashes, answered, stray>>

(* Mutation "locator_before_entry": the ledger is created and named by the  *)
(* locator first; its entry is written afterwards.                          *)
CreateLedger(b) ==
    /\ reg[b].phase = "read" /\ Mutation = "locator_before_entry"
    /\ nextLedger <= NumLedgers
    /\ ledgers' = [ledgers EXCEPT ![nextLedger] = Empty]
    /\ nextLedger' = nextLedger + 1
    /\ reg' = [reg EXCEPT ![b].phase = "written", ![b].ledger = nextLedger]
    /\ lastAction' = [name |-> "CreateLedger", params |-> [broker |-> b, ledger |-> nextLedger]]
    /\ UNCHANGED <<locIndex, locVersion, owner, ownerSession, session, alive, loaded, expiries, crashes, answered, stray>>

FillEntry(b) ==
    /\ reg[b].phase = "answer" /\ reg[b].ledger /= 0 /\ ledgers[reg[b].ledger] = Empty
    /\ ledgers' = [ledgers EXCEPT ![reg[b].ledger] = reg[b].schema]
    /\ lastAction' = [name |-> "FillEntry", params |-> [broker |-> b, ledger |-> reg[b].ledger, schema |-> reg[b].schema]]
    /\ UNCHANGED <<locIndex, locVersion, nextLedger, owner, ownerSession, session, alive, loaded, reg,
                   expiries, crashes, answered, stray>>

(* The conditional write of the locator: the read's version appended.  It  *)
(* applies when the node is still at the version read (create: absent);    *)
(* otherwise BadVersion / NodeExists, the ledger is deleted, read again.   *)
(* A session that expired cannot write at all (SessionExpired).            *)
WriteLocator(b) ==
    LET r == reg[b]
        blind == (Mutation = "blind_write" /\ r.version /= Absent /\ locVersion /= Absent)
                 \/ (Mutation = "create_overwrites" /\ r.version = Absent)
        applies == locVersion = r.version \/ blind
        newIndex == Append(r.index, [ledger |-> r.ledger, schema |-> r.schema])
        outcome == IF ~alive[b] THEN "sessionExpired" ELSE IF applies THEN "ok"
                   ELSE IF r.version = Absent THEN "nodeExists" ELSE "badVersion"
    IN
    /\ r.phase = "written"
    /\ IF outcome = "ok"
       THEN /\ locIndex' = newIndex
            /\ locVersion' = IF locVersion = Absent THEN 0 ELSE locVersion + 1
            /\ reg' = [reg EXCEPT ![b].phase = "answer", ![b].answer = Len(newIndex)]
            /\ stray' = IF r.kind = "topic" /\ ~Owns(b) THEN stray \cup {Len(newIndex)} ELSE stray
            /\ UNCHANGED ledgers
       ELSE /\ ledgers' = IF ledgers[r.ledger] = Free THEN ledgers ELSE [ledgers EXCEPT ![r.ledger] = Deleted]
            /\ reg' = [reg EXCEPT ![b] = Idle]
            /\ UNCHANGED <<locIndex, locVersion, stray>>
    /\ lastAction' = [name |-> "WriteLocator", params |-> [broker |-> b, ledger |-> r.ledger, expected |-> r.version,
                      outcome |-> outcome]]
    /\ UNCHANGED <<nextLedger, owner, ownerSession, session, alive, loaded, expiries, crashes, answered>>

(* The client gets its version (0-based on the wire: position - 1). *)
Answer(b) ==
    /\ reg[b].phase = "answer"
    /\ reg[b].ledger /= 0 => ledgers[reg[b].ledger] /= Empty
    /\ answered' = answered \cup {<<reg[b].answer, reg[b].schema>>}
    /\ reg' = [reg EXCEPT ![b] = Idle]
    /\ lastAction' = [name |-> "Answer", params |-> [broker |-> b, version |-> reg[b].answer, schema |-> reg[b].schema]]
    /\ UNCHANGED <<locIndex, locVersion, ledgers, nextLedger, owner, ownerSession, session, alive, loaded,
                   expiries, crashes, stray>>

Next ==
    \E b \in Brokers :
        \/ Acquire(b) \/ ExpireSession(b) \/ RenewSession(b) \/ Crash(b)
        \/ \E s \in Schemas, k \in Kinds : ReadLocator(b, s, k)
        \/ WriteEntry(b) \/ CreateLedger(b) \/ FillEntry(b) \/ WriteLocator(b) \/ Answer(b)

Spec == Init /\ [][Next]_vars

(* ---- properties ---------------------------------------------------------- *)

(* No two different schemas were ever answered under the same version. *)
UniqueVersions ==
    \A x, y \in answered : x[1] = y[1] => x[2] = y[2]

(* A version once answered stays in the locator, naming a ledger that holds *)
(* that schema: nothing overwrote, hid or deleted it.                       *)
AnsweredStaysReadable ==
    \A x \in answered : x[1] \in DOMAIN locIndex /\ locIndex[x[1]].schema = x[2]
                        /\ ledgers[locIndex[x[1]].ledger] = x[2]

(* Every version a reader can see is complete: its ledger holds the entry *)
(* the locator claims.  A half-registered version (entry without locator, *)
(* or locator without entry) is never visible.                            *)
VisibleVersionsComplete ==
    \A i \in DOMAIN locIndex : ledgers[locIndex[i].ledger] = locIndex[i].schema

(* A broker that lost the topic cannot add a version through it. *)
LostOwnerCannotAdd ==
    stray = {}

=============================================================================
