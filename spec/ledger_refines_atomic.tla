--------------------------- MODULE ledger_refines_atomic ---------------------------
(***************************************************************************)
(* ledger.tla writes the atomic ledger's Init and Next out over its mapped *)
(* variables (AtomicInit, AtomicNext), because trace validation and        *)
(* simulation copy ledger.tla alone.  This module checks that they are     *)
(* atomic_ledger.tla's: with the mapping as an INSTANCE, every reachable   *)
(* step satisfies AtomicNext exactly when it satisfies the module's Next   *)
(* (or leaves its variables unchanged).  tests/spec/test_tlc_models.py     *)
(* runs it with ledger models' constants.                                  *)
(***************************************************************************)
EXTENDS ledger

AL == INSTANCE atomic_ledger WITH
        state <- AState, pushed <- wPushed, lac <- wLac, end <- AEnd, content <- AContent

SameInit == AtomicInit <=> AL!Init
SameSteps == [][(AtomicNext \/ UNCHANGED atomicVars) <=> [AL!Next]_AL!vars]_vars
=============================================================================
