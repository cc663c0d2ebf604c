"""The BookKeeper client: pure cores (distribution, writer, read-LAC, recovery, reader, placement).

Every core takes inputs (bookie responses, "no answer" timeouts, metadata results, the
shell's choices) and returns outputs (requests to send, metadata updates to apply,
completions); the pipelined transport's shell and the conformance harness drive the same cores.
"""
