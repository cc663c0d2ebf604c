"""The multi-process reference cluster: ZooKeeper, bookie and broker processes on loopback.

- `nodes`: one node process (launch detached, find it again from its pidfile, signal it, health).
- `deployment`: a whole cluster in one directory, its state file cluster.json, up/down/status
  and the fault verbs (kill, pause, resume, restart, expire-session).
- `sessions`: forcing a node's ZooKeeper session to expire from outside the node.
"""
