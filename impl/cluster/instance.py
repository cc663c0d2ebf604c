"""A Pulsar instance in one directory: a configuration-store ZooKeeper and N clusters on 127.0.0.1.

Layout of the directory D:
    instance.json           the configuration store's URL and the clusters' names (written first)
    configuration-store/    a Cluster of one ZooKeeper server and nothing else (its cluster.json)
    cluster-1/ ...          each a Cluster (impl/cluster/deployment.py): its own ZooKeeper, bookies,
                            brokers, proxies; its brokers run with --cluster cluster-N and
                            --configuration-store <the instance's>

Every part is planned (its cluster.json written) before anything is launched, so `down` finds and stops
everything also after a failed or interrupted `up`. `up` starts the configuration store, then each
cluster in turn; each cluster registers its ClusterData (every broker's URLs) before its brokers start.
"""

from __future__ import annotations

import contextlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impl.cluster.deployment import STATE_FILE, Cluster, ClusterError, NodeStatus, Progress

INSTANCE_FILE = "instance.json"
CONFIGURATION_DIR = "configuration-store"


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class ClusterStatus:
    name: str  # configuration-store, cluster-1, ...
    nodes: list[NodeStatus]
    pulsar_service_url: str | None
    web_service_urls: list[str]


class Instance:
    """The instance described by D/instance.json (see the module docstring)."""

    def __init__(self, directory: Path, state: dict[str, Any]) -> None:
        self.directory = directory
        self.state = state

    @classmethod
    def plan(
        cls,
        directory: str | Path,
        clusters: int = 2,
        bookies: int = 2,
        brokers: int = 1,
        proxies: int = 0,
        die_with_parent: bool = False,
        broker_options: tuple[str, ...] = (),
    ) -> Instance:
        """Lay out a new instance in `directory`: names cluster-1 .. cluster-N, ports chosen now."""
        directory = Path(directory).resolve()
        if (directory / INSTANCE_FILE).exists() or (directory / STATE_FILE).exists():
            raise ClusterError(
                f"{directory} already holds an instance or a cluster; stop it (pulsar-ref instance down --dir "
                f"{directory}) and start a new one in an empty --dir"
            )
        if clusters < 1:
            raise ClusterError(f"an instance needs at least 1 cluster, not {clusters}")
        if brokers < 1:
            raise ClusterError(f"each cluster of an instance needs at least 1 broker, not {brokers}")
        names = [f"cluster-{i}" for i in range(1, clusters + 1)]
        instance = cls(directory, {"configuration_store": None, "clusters": names})
        instance.save()  # first: `down` finds whatever the planning below lays out, even if it fails
        configuration = Cluster.plan_configuration_store(directory / CONFIGURATION_DIR, die_with_parent)
        instance.state["configuration_store"] = configuration.metadata_url
        instance.save()
        for name in names:
            Cluster.plan(
                directory / name,
                zookeepers=1,
                bookies=bookies,
                brokers=brokers,
                proxies=proxies,
                die_with_parent=die_with_parent,
                broker_options=broker_options,
                name=name,
                configuration_store=configuration.metadata_url,
            )
        return instance

    @classmethod
    def load(cls, directory: str | Path) -> Instance:
        directory = Path(directory).resolve()
        try:
            state = json.loads((directory / INSTANCE_FILE).read_text())
        except FileNotFoundError:
            raise ClusterError(
                f"no instance in {directory} (no {INSTANCE_FILE}); start one with: pulsar-ref instance up --dir "
                f"{directory}"
            ) from None
        except (OSError, ValueError) as e:
            raise ClusterError(f"cannot read {directory / INSTANCE_FILE}: {e}") from None
        return cls(directory, state)

    def save(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / (INSTANCE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        tmp.replace(self.directory / INSTANCE_FILE)

    @property
    def configuration_store_url(self) -> str | None:
        url = self.state.get("configuration_store")
        return str(url) if url else None

    @property
    def cluster_names(self) -> list[str]:
        return [str(name) for name in self.state.get("clusters", [])]

    def parts(self) -> list[tuple[str, Cluster]]:
        """The configuration store and every cluster that has been planned, in start order."""
        found = []
        for name, sub in [(CONFIGURATION_DIR, CONFIGURATION_DIR), *((n, n) for n in self.cluster_names)]:
            if (self.directory / sub / STATE_FILE).exists():
                found.append((name, Cluster.load(self.directory / sub)))
        return found

    def clusters(self) -> list[Cluster]:
        return [cluster for name, cluster in self.parts() if name != CONFIGURATION_DIR]

    def up(self, timeout_s: float = 90.0, progress: Progress = _quiet, die_with_parent: bool = False) -> None:
        """Start the configuration store, then each cluster; on any failure stop everything."""
        try:
            parts = self.parts()
            if len(parts) != len(self.cluster_names) + 1:
                raise ClusterError(f"the instance in {self.directory} was not fully planned; stop it and start anew")
            for name, part in parts:
                part.die_with_parent = die_with_parent
                progress(f"{name}:")
                part.up(timeout_s, progress)
        except ClusterError:
            progress("instance start-up failed; stopping everything launched ...")
            self.down(progress)
            raise
        except BaseException:
            self.down(progress)
            raise

    def down(self, progress: Progress = _quiet) -> None:
        """Stop the clusters (side by side), then the configuration store; safe at any time, also after a
        failed `up`."""
        parts = self.parts()

        def stop(name: str, part: Cluster) -> None:
            with contextlib.suppress(ClusterError):
                part.down(lambda message: progress(f"{name}: {message}"))

        clusters = [(name, part) for name, part in parts if name != CONFIGURATION_DIR]
        if clusters:
            with ThreadPoolExecutor(max_workers=len(clusters), thread_name_prefix="instance-down") as pool:
                for done in [pool.submit(stop, name, part) for name, part in clusters]:
                    done.result()
        for name, part in parts:
            if name == CONFIGURATION_DIR:
                stop(name, part)

    def status(self) -> list[ClusterStatus]:
        return [
            ClusterStatus(name, part.status(), part.pulsar_service_url, part.web_service_urls)
            for name, part in self.parts()
        ]
