"""Benchmark: `spade serve` against OpenEnv's own Python server hosting the same environment
source by exec() (no sandbox), over loopback WebSocket sessions, in the same run.

    cargo build --release
    target/serve-venv/bin/python python/bench/serve_bench.py --spade target/release/spade \
        [--env tests/envs/grid_walk/env.py --actions tests/envs/grid_walk/actions.txt] \
        [--sessions 1,16,256] [--seconds 10]

Each of N concurrent sessions (one client process, asyncio, OpenEnv's GenericEnvClient) loops:
connect, reset(seed), play the actions until the episode ends, close. Printed per server and N:
sessions/s (episodes completed per second), steps/s, p50/p99 step latency (client-side,
send to answer), and the server's peak private memory (RssAnon) while it ran (and, for spade, the peak of what its
memory account charged, from /health). spade serve runs with its default memory budget.
"""

import argparse
import asyncio
import json
import os
import resource
import threading
import urllib.request
import socket
import statistics
import subprocess
import sys
import time

from openenv.core.generic_client import GenericEnvClient

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command):
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    if "listening on " not in line:
        process.kill()
        raise SystemExit(f"{command[0]} did not start: {line!r}")
    url = line.split("listening on ")[1].split()[0]
    if line.startswith("spade serve:"):
        # spade's port opens before its start-up checks end: wait for them.
        for line in process.stdout:
            if "environments checked" in line:
                break
    return process, url


async def session_loop(url, actions, deadline, seed, latencies, counts):
    while time.perf_counter() < deadline:
        async with GenericEnvClient(base_url=url, message_timeout_s=600) as env:
            await env.reset(seed=seed)
            for action in actions:
                t0 = time.perf_counter()
                result = await env.step({"message": action})
                latencies.append(time.perf_counter() - t0)
                counts["steps"] += 1
                if result.done:
                    break
        counts["sessions"] += 1
        seed += 1000


class Peak:
    """Samples a server's private memory (RssAnon) and spade's charged bytes every 0.2 s."""

    def __init__(self, pid, health_url=None):
        self.pid, self.health_url = pid, health_url
        self.rss = self.charged = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.wait(0.2):
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    # Private memory: RSS also counts every mapping of the same page-cache
                    # page (the guest's image, mapped by each sandbox) once per mapping.
                    if line.startswith("RssAnon:"):
                        self.rss = max(self.rss, int(line.split()[1]) * 1024)
            if self.health_url:
                with urllib.request.urlopen(self.health_url) as r:
                    self.charged = max(self.charged, json.load(r)["memory"]["charged"])

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


async def measure(url, actions, sessions, seconds):
    latencies, counts = [], {"steps": 0, "sessions": 0}
    start_t = time.perf_counter()
    deadline = start_t + seconds
    await asyncio.gather(*(session_loop(url, actions, deadline, i, latencies, counts) for i in range(sessions)))
    elapsed = time.perf_counter() - start_t
    latencies.sort()
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000
    return {
        "sessions_per_s": counts["sessions"] / elapsed,
        "steps_per_s": counts["steps"] / elapsed,
        "p50_ms": p(0.50),
        "p99_ms": p(0.99),
        "steps": counts["steps"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spade", default=os.path.join(REPO, "target", "release", "spade"))
    parser.add_argument("--env", default=os.path.join(REPO, "tests", "envs", "grid_walk", "env.py"))
    parser.add_argument("--actions", default=os.path.join(REPO, "tests", "envs", "grid_walk", "actions.txt"))
    parser.add_argument("--sessions", default="1,16,256")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    actions = open(args.actions, encoding="utf-8").read().splitlines()
    counts = [int(n) for n in args.sessions.split(",")]
    most = max(counts) + 8

    # One socket per session on the client side.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    spade, spade_url = start([args.spade, "serve", args.env, "--bind", "127.0.0.1:0", "--max-sessions", str(most)])
    port = free_port()
    openenv, openenv_url = start([sys.executable, os.path.join(HERE, "openenv_exec_server.py"), args.env, str(port), str(most)])
    rows = []
    try:
        for n in counts:
            for name, url, process in (
                ("spade serve (sandbox)", spade_url, spade),
                ("OpenEnv Python server (exec)", openenv_url, openenv),
            ):
                health = spade_url.replace("ws://", "http://").rstrip("/") + "/health" if process is spade else None
                with Peak(process.pid, health) as peak:
                    r = asyncio.run(measure(url, actions, n, args.seconds))
                r["rss_mib"], r["charged_mib"] = peak.rss / 2**20, peak.charged / 2**20
                rows.append((name, n, r))
                print(f"{name:30} {n:4} sessions: {r['sessions_per_s']:8.1f} sessions/s {r['steps_per_s']:8.0f} steps/s "
                      f"p50 {r['p50_ms']:6.2f} ms p99 {r['p99_ms']:7.2f} ms peak RssAnon {r['rss_mib']:.0f} MiB", flush=True)
    finally:
        for p in (spade, openenv):
            p.terminate()
            p.wait(timeout=60)
    print()
    print("| server | sessions | sessions/s | steps/s | p50 step | p99 step | peak RssAnon | peak charged |")
    print("|---|---|---|---|---|---|---|---|")
    for name, n, r in rows:
        charged = f"{r['charged_mib']:,.0f} MiB" if r["charged_mib"] else "-"
        print(f"| {name} | {n} | {r['sessions_per_s']:.1f} | {r['steps_per_s']:,.0f} | {r['p50_ms']:.2f} ms | {r['p99_ms']:.2f} ms "
              f"| {r['rss_mib']:,.0f} MiB | {charged} |")


if __name__ == "__main__":
    main()
