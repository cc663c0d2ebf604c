"""The broker: managed ledgers, cursors, topics, ownership, and the Pulsar client."""
