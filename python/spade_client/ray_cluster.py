"""Scale `spade serve` past one machine on Ray: one server per node, sessions spread over them.

```python
import ray
from spade_client.ray_cluster import start_servers, SessionSpreader

ray.init(address="auto")                      # an existing Ray cluster
servers = start_servers("spade", ["env.py"], token_file="/shared/token")   # one per alive node
spreader = SessionSpreader([s.url for s in servers], token=open("/shared/token").read().strip())
with spreader.session(0).sync() as env: ...  # session i goes to server i % len(servers)
```

Each `SpadeServerActor` starts `spade serve` as a child process on its node (bound to the node's
IP, or loopback for a one-machine cluster), reports its URL, and stops it when the actor is
killed or `stop()` is called. Ray does the placement; there is no cluster manager here.
"""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import dataclass
from typing import List, Optional, Sequence

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .client import SpadeEnv

READY_PREFIX = "spade serve: listening on "
CHECKED = "environments checked"


@ray.remote(num_cpus=0)
class SpadeServerActor:
    """Runs one `spade serve` process on the node the actor lives on."""

    def __init__(self, spade_bin: str, envs: Sequence[str], host: str, extra_args: Sequence[str] = ()):
        command = [spade_bin, "serve", *envs, "--bind", f"{host}:0", *extra_args]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        line = self._process.stdout.readline()
        if not line.startswith(READY_PREFIX):
            self._process.kill()
            raise RuntimeError(f"spade serve did not start ({command}): first line {line!r}")
        self._url = line[len(READY_PREFIX):].split()[0]
        # The port opens before the start-up checks end; wait until every environment is checked.
        for line in self._process.stdout:
            if CHECKED in line:
                break
        else:
            self._process.kill()
            raise RuntimeError(f"spade serve exited before its start-up checks ended ({command})")

    def url(self) -> str:
        return self._url

    def pid(self) -> int:
        return self._process.pid

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def stop(self) -> int:
        """Stops the server gracefully (SIGTERM: sessions are closed, trajectories finished)."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        return self._process.returncode


@dataclass
class Server:
    """A started server: its actor, URL, process id and node."""

    actor: "ray.actor.ActorHandle"
    url: str
    pid: int
    node_id: str


def start_servers(
    spade_bin: str,
    envs: Sequence[str],
    per_node: int = 1,
    host: Optional[str] = None,
    token_file: Optional[str] = None,
    extra_args: Sequence[str] = (),
    insecure_no_auth: bool = False,
) -> List[Server]:
    """Starts `per_node` servers on every alive Ray node and waits until they listen and have
    checked their environments.

    `host` defaults to loopback on a one-node cluster and to each node's IP otherwise. A server
    on an address other than loopback needs `token_file` (a path readable on every node):
    without one, anyone who can reach the node could run code on it, so this raises
    `ValueError` unless `insecure_no_auth=True` is given for a network you trust.
    """
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if not nodes:
        raise RuntimeError("the Ray cluster has no alive nodes")
    binds = [host or ("127.0.0.1" if len(nodes) == 1 else node["NodeManagerAddress"]) for node in nodes]
    exposed = [b for b in binds if not _is_loopback(b)]
    if exposed and token_file is None and not insecure_no_auth:
        raise ValueError(
            f"refusing to start spade serve on {exposed[0]} without a token: pass token_file= "
            "(a file readable on every node), or insecure_no_auth=True on a trusted network"
        )
    args = list(extra_args)
    if token_file is not None:
        args += ["--token-file", token_file]
    elif insecure_no_auth:
        args += ["--insecure-no-auth"]
    actors = []
    for node, bind in zip(nodes, binds):
        for _ in range(per_node):
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            actors.append(
                SpadeServerActor.options(scheduling_strategy=strategy).remote(spade_bin, list(envs), bind, args)
            )
    urls = ray.get([a.url.remote() for a in actors])
    pids = ray.get([a.pid.remote() for a in actors])
    node_ids = ray.get([a.node_id.remote() for a in actors])
    return [Server(a, u, p, n) for a, u, p, n in zip(actors, urls, pids, node_ids)]


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def stop_servers(servers: Sequence[Server]) -> List[int]:
    """Stops every server; returns their exit codes."""
    return ray.get([s.actor.stop.remote() for s in servers])


class SessionSpreader:
    """Spreads sessions over servers: session `i` goes to server `i % len(urls)`."""

    def __init__(self, urls: Sequence[str], token: Optional[str] = None):
        if not urls:
            raise ValueError("SessionSpreader needs at least one server URL")
        self.urls = list(urls)
        self.token = token

    def url_for(self, index: int) -> str:
        return self.urls[index % len(self.urls)]

    def session(self, index: int) -> SpadeEnv:
        """An (unconnected) client for session `index`."""
        return SpadeEnv(base_url=self.url_for(index), token=self.token)
