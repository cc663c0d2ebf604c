------------------------------ MODULE metadata ------------------------------
(***************************************************************************)
(* Conditional-write (CW) metadata, as ZooKeeper and the project's         *)
(* embedded store offer it, and the seed's central claim about it:         *)
(*                                                                         *)
(*  (a) conditional writes give mutual exclusion of METADATA updates: a    *)
(*      read-modify-write of a versioned node never loses an update, even  *)
(*      when clients act on stale reads (NoLostUpdate holds);              *)
(*  (b) conditional writes alone do NOT stop two clients from writing      *)
(*      DATA: an owner elected by an ephemeral node whose session expired  *)
(*      keeps writing to storage until it notices, while the next owner    *)
(*      writes too (SingleWriter fails with Fencing = FALSE);             *)
(*  (c) fencing the storage with the owner's epoch before writing restores *)
(*      a single writer (SingleWriter holds with Fencing = TRUE).          *)
(*                                                                         *)
(* Nodes: /counter (a versioned node updated by read-modify-CW), /owner    *)
(* (an ephemeral node: whoever creates it owns the data), /seq (a parent   *)
(* of sequential children, as used for ledger ids).  Every client action  *)
(* on the store needs a live session; a client learns that its session    *)
(* expired only when it reconnects (NoticeExpiry).                        *)
(*                                                                         *)
(*  (d) a conditional write whose answer is lost (a connection loss: it    *)
(*      applied or not, the client does not know; issue 24 item 3), with   *)
(*      LostAnswers = TRUE: the client retries with the same version, and  *)
(*      a retry that meets its own write gets BadVersion.  Only a writer   *)
(*      token in the data lets it tell its own write from another's        *)
(*      (Resolution = "token"); taking BadVersion for another writer       *)
(*      ("conflict") or comparing the data alone ("content") reports a     *)
(*      wrong outcome (NoWrongOutcome).  LostAnswers and Resolution are    *)
(*      definitions a model overrides in its CONSTANTS.                    *)
(***************************************************************************)
EXTENDS Integers, Sequences, FiniteSets

CONSTANTS
    Clients,            \* client ids (model values)
    MaxUpdates,         \* bound on successful updates of /counter
    MaxSequential,      \* bound on sequential children of /seq
    MaxExpiries,        \* bound on session expiries
    MaxDataWrites,      \* bound on writes to the data storage
    ConditionalWrites,  \* TRUE: setData with the version read; FALSE: blind writes (version -1)
    Fencing             \* TRUE: a new owner fences the storage with its epoch before writing

ASSUME /\ ConditionalWrites \in BOOLEAN /\ Fencing \in BOOLEAN
       /\ {MaxUpdates, MaxSequential, MaxExpiries, MaxDataWrites} \subseteq Nat

AnyVersion == -1        \* ZooKeeper's "match any version"
NoSession == 0          \* the ephemeral owner of a persistent node / an absent node
NoWriter == "none"      \* the writer token of /counter before any update

\* Issue 24 item 3 (overridden in a model's CONSTANTS): a conditional write's answer can be lost, and how
\* a client resolves its retry's BadVersion: "token" (the data carries the writer: version + 1 and its
\* own token = its write; version + 1 and another token = not its write; a later version = unknown),
\* "content" (version + 1 and its own data = its write), "conflict" (BadVersion = another writer's).
LostAnswers == FALSE
Resolution == "token"
\* Issue 47 (overridden in a mutation model's CONSTANTS): one-rule changes that break one property each,
\* so that no property passes vacuously (`spec check`'s vacuity check): "epochs_stay" (every owner
\* node gets epoch 1: epochs stop advancing), "expiry_keeps_ephemeral" (an expired session's owner node
\* stays), "create_ignores_exists" (create of /owner succeeds over an existing node),
\* "sequential_reuses_name" (a sequential create does not bump the child version), "set_keeps_version"
\* (setData does not bump the version).
Mutation == "none"
NoPending == [active |-> FALSE, version |-> 0, data |-> 0, applied |-> FALSE]
\* The writer token /counter's data carries: the client and its write's number (unique per write);
\* observed only with LostAnswers (elsewhere nothing reads it, and it would only split states).
Token(c, n) == IF LostAnswers THEN <<c, n>> ELSE NoWriter

VARIABLES
    sessionId,      \* [Clients -> Nat]: the client's current session id (new id on reconnect)
    sessionAlive,   \* [Clients -> BOOLEAN]: is that session alive in the store?
    nextSession,    \* the next session id the store hands out
    expiries,       \* session expiries so far
    counter,        \* /counter: [version, data]
    updates,        \* successful updates of /counter so far (what data should count)
    readCache,      \* [Clients -> [version, data]]: the client's last read of /counter (may be stale)
    owner,          \* /owner: [exists, version, czxid, ephemeralOwner]
    zxid,           \* the store's transaction counter; czxid of /owner is its epoch
    seqChildren,    \* the names (numbers) of /seq's sequential children
    cversion,       \* /seq's child version: the next sequence number
    role,           \* [Clients -> {"none","elected","writer"}]: what the client believes it is
    epoch,          \* [Clients -> Nat]: czxid of the /owner node the client created
    storage,        \* the data storage: [log: Seq([client, epoch]), fence: Nat]
    pending,        \* [Clients -> [active, version, data, applied]]: a write whose answer was lost (applied:
                    \* the truth, which the client does not know)
    issued,         \* [Clients -> Nat]: the client's writes of /counter so far (its token's number; with LostAnswers)
    misreported,    \* a client was told a wrong outcome (a write that did not apply succeeded, or one that did failed)
    \* Ghost variables (issue 47): history the protocol never reads, so that a property stated over them
    \* cannot be made to hold by the bug it guards (conformance compares no ghost* variable).
    ghostTerm,      \* successful creates of /owner so far: the ownership term
    ghostHolderTerm, \* [Clients -> Nat]: the term of the /owner node the client created last (0: none)
    ghostHolders,   \* clients whose created /owner node has not been deleted
    ghostWriteTerms, \* the writer's term of each write the storage accepted, in order
    lastAction      \* auxiliary, for conformance: [name, params] of the last action (not in the VIEW)

vars == <<sessionId, sessionAlive, nextSession, expiries, counter, updates, readCache, owner, zxid,
          seqChildren, cversion, role, epoch, storage, pending, issued, misreported, lastAction,
          ghostTerm, ghostHolderTerm, ghostHolders, ghostWriteTerms>>
view == <<sessionId, sessionAlive, nextSession, expiries, counter, updates, readCache, owner, zxid,
          seqChildren, cversion, role, epoch, storage, pending, issued, misreported,
          ghostTerm, ghostHolderTerm, ghostHolders, ghostWriteTerms>>
ghosts == <<ghostTerm, ghostHolderTerm, ghostHolders, ghostWriteTerms>>

-----------------------------------------------------------------------------
Init ==
    /\ sessionId = [c \in Clients |-> 0]
    /\ sessionAlive = [c \in Clients |-> FALSE]
    /\ nextSession = 1
    /\ expiries = 0
    /\ counter = [version |-> 0, data |-> 0, writer |-> NoWriter]
    /\ updates = 0
    /\ readCache = [c \in Clients |-> [version |-> 0, data |-> 0]]
    /\ owner = [exists |-> FALSE, version |-> 0, czxid |-> 0, ephemeralOwner |-> NoSession]
    /\ zxid = 0
    /\ seqChildren = {}
    /\ cversion = 0
    /\ role = [c \in Clients |-> "none"]
    /\ epoch = [c \in Clients |-> 0]
    /\ storage = [log |-> <<>>, fence |-> 0]
    /\ pending = [c \in Clients |-> NoPending]
    /\ issued = [c \in Clients |-> 0]
    /\ misreported = FALSE
    /\ lastAction = [name |-> "Init", params |-> [none |-> 0]]
    /\ ghostTerm = 0
    /\ ghostHolderTerm = [c \in Clients |-> 0]
    /\ ghostHolders = {}
    /\ ghostWriteTerms = <<>>

Live(c) == sessionAlive[c]

\* ---- Sessions ----

\* The client connects (or reconnects after noticing an expiry) and gets a new session.
ConnectStep(c) ==
    /\ ~sessionAlive[c]
    /\ role[c] = "none"                 \* a reconnecting client first noticed the expiry
    /\ sessionId' = [sessionId EXCEPT ![c] = nextSession]
    /\ sessionAlive' = [sessionAlive EXCEPT ![c] = TRUE]
    /\ nextSession' = nextSession + 1
    /\ lastAction' = [name |-> "Connect", params |-> [client |-> c, session |-> nextSession]]
    /\ UNCHANGED <<pending, issued, misreported,
                   expiries, counter, updates, readCache, owner, zxid, seqChildren, cversion, role, epoch, storage>>

\* The store expires a session and deletes its ephemeral nodes.  The client is not told.
ExpireSessionStep(c) ==
    /\ sessionAlive[c]
    /\ expiries < MaxExpiries
    /\ sessionAlive' = [sessionAlive EXCEPT ![c] = FALSE]
    /\ expiries' = expiries + 1
    /\ IF owner.exists /\ owner.ephemeralOwner = sessionId[c] /\ Mutation # "expiry_keeps_ephemeral"
       THEN /\ owner' = [owner EXCEPT !.exists = FALSE, !.ephemeralOwner = NoSession]
            /\ zxid' = zxid + 1
       ELSE UNCHANGED <<owner, zxid>>
    /\ lastAction' = [name |-> "ExpireSession", params |-> [client |-> c, session |-> sessionId[c]]]
    /\ UNCHANGED <<pending, issued, misreported,
                   sessionId, nextSession, counter, updates, readCache, seqChildren, cversion, role, epoch,
                   storage>>

\* Trying to reconnect, the client learns its session expired: it drops what it believed.
NoticeExpiryStep(c) ==
    /\ ~sessionAlive[c]
    /\ role[c] # "none"
    /\ role' = [role EXCEPT ![c] = "none"]
    /\ lastAction' = [name |-> "NoticeExpiry", params |-> [client |-> c]]
    /\ UNCHANGED <<pending, issued, misreported,
                   sessionId, sessionAlive, nextSession, expiries, counter, updates, readCache, owner, zxid,
                   seqChildren, cversion, epoch, storage>>

\* ---- Versioned node: read, then conditional set on what was read ----

ReadCounterStep(c) ==
    /\ Live(c)
    /\ readCache' = [readCache EXCEPT ![c] = [version |-> counter.version, data |-> counter.data]]
    /\ lastAction' = [name |-> "ReadCounter", params |-> [client |-> c, version |-> counter.version]]
    /\ UNCHANGED <<pending, issued, misreported,
                   sessionId, sessionAlive, nextSession, expiries, counter, updates, owner, zxid,
                   seqChildren, cversion, role, epoch, storage>>

\* setData(/counter, read data + 1, expectedVersion): BadVersion unless the version still matches. The data
\* carries the writer's token. With LostAnswers the answer can be lost, after the write applied or with
\* the request: the client keeps the write pending (one at a time) and retries it.
IncrementCounterStep(c) ==
    /\ Live(c)
    /\ updates < MaxUpdates
    /\ ~pending[c].active
    /\ LostAnswers => issued[c] < MaxUpdates  \* each client issues at most MaxUpdates writes (tokens 1..MaxUpdates)
    /\ LET expected == IF ConditionalWrites THEN readCache[c].version ELSE AnyVersion
           ok == expected = AnyVersion \/ expected = counter.version
           data == readCache[c].data + 1
           n == IF LostAnswers THEN issued[c] + 1 ELSE 0
       IN \E outcome \in {"answered"} \cup (IF LostAnswers THEN {"lostAfter", "lostBefore"} ELSE {}) :
          LET lost == outcome # "answered"
              applied == ok /\ outcome # "lostBefore"
          IN /\ IF applied
                THEN /\ counter' = [version |-> IF Mutation = "set_keeps_version" THEN counter.version
                                                 ELSE counter.version + 1, data |-> data, writer |-> Token(c, n)]
                     /\ updates' = updates + 1
                     /\ zxid' = zxid + 1
                ELSE UNCHANGED <<counter, updates, zxid>>
             /\ issued' = [issued EXCEPT ![c] = n]
             /\ pending' = IF lost
                           THEN [pending EXCEPT ![c] = [active |-> TRUE, version |-> expected, data |-> data,
                                                        applied |-> applied]]
                           ELSE pending
             /\ lastAction' = [name |-> "IncrementCounter",
                               params |-> [client |-> c, expectedVersion |-> expected, badVersion |-> ~ok /\ ~lost,
                                           lost |-> lost, applied |-> applied]]
    /\ UNCHANGED <<sessionId, sessionAlive, nextSession, expiries, readCache, owner, seqChildren, cversion,
                   role, epoch, storage, misreported>>

\* The retry of a write whose answer was lost: the same setData, the same expected version, on the same
\* session. It applies if the first did not (and nothing else changed /counter); BadVersion otherwise, and
\* the client reads /counter back to resolve the outcome: its own write (success), another's (failure),
\* or unknown (reported as such: never wrong).
RetryIncrementStep(c) ==
    /\ Live(c)
    /\ pending[c].active
    /\ LET p == pending[c]
           ok == p.version = AnyVersion \/ p.version = counter.version
           next == counter.version = p.version + 1
           verdict == IF ok THEN "applied"
                      ELSE CASE Resolution = "token" -> IF ~next THEN "unknown"
                                                        ELSE IF counter.writer = Token(c, issued[c]) THEN "own"
                                                        ELSE "other"
                             [] Resolution = "content" -> IF next /\ counter.data = p.data THEN "own" ELSE "other"
                             [] OTHER -> "other"  \* "conflict": BadVersion taken for another writer's update
       IN /\ (ok => updates < MaxUpdates)
          /\ IF ok
             THEN /\ counter' = [version |-> counter.version + 1, data |-> p.data, writer |-> Token(c, issued[c])]
                  /\ updates' = updates + 1
                  /\ zxid' = zxid + 1
                  /\ UNCHANGED <<readCache, misreported>>
             ELSE /\ readCache' = [readCache EXCEPT ![c] = [version |-> counter.version, data |-> counter.data]]
                  /\ misreported' = (misreported \/ (verdict = "own" /\ ~p.applied) \/ (verdict = "other" /\ p.applied))
                  /\ UNCHANGED <<counter, updates, zxid>>
          /\ pending' = [pending EXCEPT ![c] = NoPending]
          /\ lastAction' = [name |-> "RetryIncrement", params |-> [client |-> c, expectedVersion |-> p.version,
                                                                   verdict |-> verdict]]
    /\ UNCHANGED <<sessionId, sessionAlive, nextSession, expiries, owner, seqChildren, cversion, role, epoch,
                   storage, issued>>

\* ---- Sequential nodes ----

CreateSequentialStep(c) ==
    /\ Live(c)
    /\ cversion < MaxSequential
    /\ seqChildren' = seqChildren \cup {cversion}
    /\ cversion' = IF Mutation = "sequential_reuses_name" THEN cversion ELSE cversion + 1
    /\ zxid' = zxid + 1
    /\ lastAction' = [name |-> "CreateSequential", params |-> [client |-> c, name |-> cversion]]
    /\ UNCHANGED <<pending, issued, misreported,
                   sessionId, sessionAlive, nextSession, expiries, counter, updates, readCache, owner,
                   role, epoch, storage>>

\* ---- Ephemeral ownership node and the data storage ----

\* create(/owner, ephemeral): NodeExists unless absent.  The node's czxid is the owner's epoch.
CreateOwnerNodeStep(c) ==
    /\ Live(c)
    /\ role[c] = "none"
    /\ ~owner.exists \/ Mutation = "create_ignores_exists"
    /\ LET e == IF Mutation = "epochs_stay" THEN 1 ELSE zxid + 1
       IN /\ owner' = [exists |-> TRUE, version |-> 0, czxid |-> e, ephemeralOwner |-> sessionId[c]]
          /\ epoch' = [epoch EXCEPT ![c] = e]
    /\ zxid' = zxid + 1
    \* without fencing the new owner may write at once; with fencing it first fences
    /\ role' = [role EXCEPT ![c] = IF Fencing THEN "elected" ELSE "writer"]
    /\ lastAction' = [name |-> "CreateOwnerNode", params |-> [client |-> c, epoch |-> zxid + 1]]
    /\ UNCHANGED <<pending, issued, misreported,
                   sessionId, sessionAlive, nextSession, expiries, counter, updates, readCache, seqChildren,
                   cversion, storage>>

\* Fence the storage with the owner's epoch: storage refuses writes of any older epoch from now on.
FenceStorageStep(c) ==
    /\ role[c] = "elected"
    /\ storage' = [storage EXCEPT !.fence = IF epoch[c] > @ THEN epoch[c] ELSE @]
    /\ role' = [role EXCEPT ![c] = "writer"]
    /\ lastAction' = [name |-> "FenceStorage", params |-> [client |-> c, epoch |-> epoch[c]]]
    /\ UNCHANGED <<pending, issued, misreported,
                   sessionId, sessionAlive, nextSession, expiries, counter, updates, readCache, owner, zxid,
                   seqChildren, cversion, epoch>>

\* Write data.  The storage knows nothing about sessions: it accepts unless fenced past the epoch.
\* A fenced writer gives up its role.  Note: no live session is needed to write data.
WriteDataStep(c) ==
    /\ role[c] = "writer"
    /\ Len(storage.log) < MaxDataWrites
    /\ LET refused == Fencing /\ epoch[c] < storage.fence
       IN /\ IF refused
             THEN /\ role' = [role EXCEPT ![c] = "none"]
                  /\ UNCHANGED storage
             ELSE /\ storage' = [storage EXCEPT !.log = Append(@, [client |-> c, epoch |-> epoch[c]])]
                  /\ UNCHANGED role
          /\ lastAction' = [name |-> "WriteData", params |-> [client |-> c, epoch |-> epoch[c], fenced |-> refused]]
    /\ UNCHANGED <<pending, issued, misreported,
                   sessionId, sessionAlive, nextSession, expiries, counter, updates, readCache, owner, zxid,
                   seqChildren, cversion, epoch>>

\* The ghost variables follow the protocol's steps (GhostStep); nothing of the protocol reads them.
GhostStep(c) ==
    /\ ghostTerm' = IF lastAction'.name = "CreateOwnerNode" THEN ghostTerm + 1 ELSE ghostTerm
    /\ ghostHolderTerm' = IF lastAction'.name = "CreateOwnerNode" THEN [ghostHolderTerm EXCEPT ![c] = ghostTerm + 1]
                          ELSE ghostHolderTerm
    /\ ghostHolders' = CASE lastAction'.name = "CreateOwnerNode" -> ghostHolders \cup {c}
                        [] owner.exists /\ ~owner'.exists -> {h \in ghostHolders : sessionId[h] # owner.ephemeralOwner}
                        [] OTHER -> ghostHolders
    /\ ghostWriteTerms' = IF Len(storage'.log) > Len(storage.log) THEN Append(ghostWriteTerms, ghostHolderTerm[c])
                          ELSE ghostWriteTerms

\* Each action is the protocol's step and the ghosts' (named after the step, for the traces).
Connect(c) == ConnectStep(c) /\ GhostStep(c)
ExpireSession(c) == ExpireSessionStep(c) /\ GhostStep(c)
NoticeExpiry(c) == NoticeExpiryStep(c) /\ GhostStep(c)
ReadCounter(c) == ReadCounterStep(c) /\ GhostStep(c)
IncrementCounter(c) == IncrementCounterStep(c) /\ GhostStep(c)
RetryIncrement(c) == RetryIncrementStep(c) /\ GhostStep(c)
CreateSequential(c) == CreateSequentialStep(c) /\ GhostStep(c)
CreateOwnerNode(c) == CreateOwnerNodeStep(c) /\ GhostStep(c)
FenceStorage(c) == FenceStorageStep(c) /\ GhostStep(c)
WriteData(c) == WriteDataStep(c) /\ GhostStep(c)

Next ==
    \E c \in Clients :
        \/ Connect(c) \/ ExpireSession(c) \/ NoticeExpiry(c)
        \/ ReadCounter(c) \/ IncrementCounter(c) \/ RetryIncrement(c) \/ CreateSequential(c)
        \/ CreateOwnerNode(c) \/ FenceStorage(c) \/ WriteData(c)

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------
\* ---- Invariants ----

TypeOK ==
    /\ sessionId \in [Clients -> Nat] /\ sessionAlive \in [Clients -> BOOLEAN]
    /\ counter.version \in Nat /\ counter.data \in Nat
    /\ owner.exists \in BOOLEAN /\ owner.ephemeralOwner \in Nat
    /\ seqChildren \subseteq 0..MaxSequential
    /\ role \in [Clients -> {"none", "elected", "writer"}]
    /\ \A i \in 1..Len(storage.log) : storage.log[i].client \in Clients

\* (d) A client is never told a wrong outcome of a write whose answer was lost (unknown is allowed).
NoWrongOutcome == ~misreported

\* (a) Conditional writes serialise read-modify-write: no update is lost, even from stale reads.
NoLostUpdate == counter.data = updates

\* Every update bumps the version by exactly one.
VersionCountsUpdates == counter.version = updates

\* Sequential children get distinct, increasing names (the store's cversion).
SequentialNamesUnique == seqChildren = 0..(cversion - 1)

\* An ephemeral node always belongs to a live session.
EphemeralOwnedByLiveSession ==
    owner.exists => \E c \in Clients : sessionId[c] = owner.ephemeralOwner /\ sessionAlive[c]

\* At most one client with a live session holds the ownership node. Stated over the ghost set of
\* clients whose create succeeded and whose node was not deleted since: the node itself has one owner
\* field, so stated over it the property could not fail (a create over an existing node would pass).
OneOwnerNode ==
    Cardinality({c \in ghostHolders : sessionAlive[c]}) <= 1

\* (b)/(c) Single writer: once a newer owner's write was accepted, no older owner's write is
\* accepted after it.  The epochs of accepted writes never go down.
SingleWriter ==
    \A i, j \in 1..Len(storage.log) : i < j => storage.log[i].epoch <= storage.log[j].epoch

\* The same over an independent witness (issue 47): the ownership term, counted by the ghost at each
\* successful create of /owner, which the protocol never reads. SingleWriter is stated over the epochs
\* the protocol itself fences with; a bug that stops them advancing makes it hold trivially while an
\* expired owner writes after its successor. This one still fails then (model metadata-mutation-epochsstay-ci).
SingleWriterByTerm ==
    \A i, j \in 1..Len(ghostWriteTerms) : i < j => ghostWriteTerms[i] <= ghostWriteTerms[j]
=============================================================================
