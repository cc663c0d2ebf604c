"""Spark audit of run logs. Imports nothing from impl/: a checker must not share bugs with what it checks."""
