"""pulsar-ref: a formally specified reference implementation of Pulsar's storage stack."""

__version__ = "0.1.0"
