"""Conformance: replay TLC behaviours against the pure cores; validate implementation traces."""
