"""Geo-replication: the replicator's pure core and the remote topic's de-duplication (spec/replication.tla)."""
