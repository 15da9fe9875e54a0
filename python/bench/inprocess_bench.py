"""Benchmark: spade in-process from Python (the `spade` wheel) against CPython's `exec` path of
the same source, `spade run`'s Rust loop, and `spade serve`, all measured in this one run.

    cargo build --release && pip install ./crates/python    # into target/serve-venv
    target/serve-venv/bin/python python/bench/inprocess_bench.py --spade target/release/spade

Printed:
1. Step cost: one environment that never ends (tests/envs/never_ends), N steps, per step:
   in-process (`env.step` from Python), `spade run`'s Rust loop (the time of `spade run` with N
   actions minus with 1, stdout to /dev/null), and CPython `exec` (the environment object
   called directly, no sandbox). Target: in-process <= 1.2x the Rust loop.
2. Fresh environment: load + reset + close of the same source, in-process against CPython's
   `exec` path (a fresh module with the reference's injected names, exec, find the class,
   construct, reset); and the reference's whole loader with its validation probes:
   `spade.compat.load_game_from_code` against the same loader under CPython
   (crates/python/tests/cpython_loader.py). Target: in-process <= 2x CPython.
3. GIL: two threads stepping two long environments against one thread stepping one.
4. Throughput on tests/envs/grid_walk at 1 and 16 concurrent episodes: in-process (threads)
   and `spade serve` (OpenEnv's client over loopback WebSockets), steps/s.
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types

import spade

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ENVS = os.path.join(REPO, "tests", "envs")


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# The CPython side of the compat tests: the reference's loader, written from its documented
# behaviour (injected names, exec, class discovery, construction, validation probes).
sys.path.insert(0, os.path.join(REPO, "crates", "python", "tests"))
import cpython_loader  # noqa: E402


def cpython_load(source):
    """The reference's exec path without its validation probes: a fresh module with the
    injected names, exec, the `...Env` class, constructed."""
    module = types.ModuleType("dynamic_game")
    module.__dict__.update(cpython_loader.INJECTED)
    exec(compile(source, "env.py", "exec"), module.__dict__)
    cls = next(v for k, v in module.__dict__.items()
               if k.endswith("Env") and isinstance(v, type) and v.__module__ == "dynamic_game")
    return cls()


def best(runs, fn):
    return min(fn() for _ in range(runs))


def step_cost(args, runtime):
    source = read(os.path.join(ENVS, "never_ends", "env.py"))
    n = args.steps

    def in_process():
        env = runtime.load(source, seed=1)
        env.reset(seed=1)
        t0 = time.perf_counter()
        for _ in range(n):
            env.step("again")
        elapsed = time.perf_counter() - t0
        env.close()
        return elapsed / n

    def cpython():
        env = cpython_load(source)
        env.reset(seed=1)
        t0 = time.perf_counter()
        for _ in range(n):
            env.step("again")
        return (time.perf_counter() - t0) / n

    def spade_run(count):
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write("again\n" * count)
        try:
            t0 = time.perf_counter()
            subprocess.run(
                [args.spade, "run", os.path.join(ENVS, "never_ends", "env.py"), "--seed", "1",
                 "--actions", f.name],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
            )
            return time.perf_counter() - t0
        finally:
            os.unlink(f.name)

    def rust_loop():
        return (spade_run(n + 1) - spade_run(1)) / n

    in_process()  # warm the source cache
    ours = best(args.repeats, in_process)
    rust = best(args.repeats, rust_loop)
    exec_ = best(args.repeats, cpython)
    return ours, rust, exec_


def fresh_cost(args, runtime):
    source = read(os.path.join(ENVS, "grid_walk", "env.py"))
    n = args.fresh

    def in_process():
        t0 = time.perf_counter()
        for i in range(n):
            env = runtime.load(source, seed=i)
            env.reset(seed=i)
            env.close()
        return (time.perf_counter() - t0) / n

    def cpython():
        t0 = time.perf_counter()
        for i in range(n):
            env = cpython_load(source)
            env.reset(seed=i)
            if hasattr(env, "close"):  # as the reference closes a game
                env.close()
        return (time.perf_counter() - t0) / n

    def compat():
        t0 = time.perf_counter()
        for _ in range(n):
            spade.compat.load_game_from_code(source, max_steps=30, runtime=runtime).close()
        return (time.perf_counter() - t0) / n

    def reference():
        t0 = time.perf_counter()
        for _ in range(n):
            cpython_loader.load_game(source, 30)
        return (time.perf_counter() - t0) / n

    in_process()
    return (best(args.repeats, in_process), best(args.repeats, cpython),
            best(args.repeats, compat), best(args.repeats, reference))


def in_process_throughput(runtime, source, actions, sessions, seconds):
    counts = [0] * sessions
    deadline = time.perf_counter() + seconds

    def worker(i):
        seed = i
        while time.perf_counter() < deadline:
            with runtime.load(source, seed=seed) as env:
                env.reset(seed=seed)
                for action in actions:
                    *_, terminated, truncated, _ = env.step(action)
                    counts[i] += 1
                    if terminated or truncated:
                        break
            seed += 1000

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def throughput(args, runtime):
    sys.path.insert(0, HERE)
    import serve_bench  # the served side, OpenEnv's client (needs `openenv`)

    env_path = os.path.join(ENVS, "grid_walk", "env.py")
    source = read(env_path)
    actions = read(os.path.join(ENVS, "grid_walk", "actions.txt")).splitlines()
    counts = [int(n) for n in args.sessions.split(",")]
    most = max(counts) + 8
    server, url = serve_bench.start([
        args.spade, "serve", env_path, "--bind", "127.0.0.1:0", "--max-sessions", str(most),
        "--memory-budget", f"{(2 * most + 2) * 512}M",
    ])
    rows = []
    try:
        for n in counts:
            ours = in_process_throughput(runtime, source, actions, n, args.seconds)
            served = asyncio.run(serve_bench.measure(url, actions, n, args.seconds))["steps_per_s"]
            rows.append((n, ours, served))
    finally:
        server.terminate()
        server.wait(timeout=60)
    return rows


BUSY = """
class BusyEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns
    def reset(self, seed=None):
        return "ready", {}
    def step(self, action):
        total = 0
        for i in range(int(action)):
            total += i % 7
        return str(total), 0.0, False, False, {}
"""


def parallel_ratio(args, runtime):
    """Two threads each stepping a long environment, against one thread stepping one: 1.0
    means the two ran fully in parallel (the GIL is released), 2.0 fully serialised."""

    def run(threads):
        envs = [runtime.load(BUSY) for _ in range(threads)]
        for env in envs:
            env.reset(seed=1)
        workers = [threading.Thread(target=env.step, args=("1500000",)) for env in envs]
        t0 = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return time.perf_counter() - t0

    run(1)
    one, two = best(args.repeats, lambda: run(1)), best(args.repeats, lambda: run(2))
    return one, two


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spade", default=os.path.join(REPO, "target", "release", "spade"))
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--fresh", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sessions", default="1,16")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    runtime = spade.Runtime()

    ours, rust, exec_ = step_cost(args, runtime)
    print("| step (never_ends) | per step | vs spade run's Rust loop |")
    print("|---|---|---|")
    print(f"| in-process (spade wheel) | {ours * 1e6:.2f} us | {ours / rust:.2f}x |")
    print(f"| spade run (Rust loop) | {rust * 1e6:.2f} us | 1.00x |")
    print(f"| CPython exec (no sandbox) | {exec_ * 1e6:.2f} us | {exec_ / rust:.2f}x |")
    print()
    fresh, fresh_exec, compat, reference = fresh_cost(args, runtime)
    print("| fresh env (grid_walk) | per env | vs CPython |")
    print("|---|---|---|")
    print(f"| load + reset + close, in-process (spade wheel) | {fresh * 1e3:.2f} ms | {fresh / fresh_exec:.2f}x |")
    print(f"| exec + construct + reset, CPython (no sandbox) | {fresh_exec * 1e3:.3f} ms | 1.00x |")
    print(f"| the reference's loader with its probes: spade.compat | {compat * 1e3:.2f} ms | {compat / reference:.2f}x |")
    print(f"| the reference's loader with its probes: CPython exec | {reference * 1e3:.3f} ms | 1.00x |")
    print()
    one, two = parallel_ratio(args, runtime)
    print(f"GIL: one long step {one * 1e3:.0f} ms on one thread, two on two threads "
          f"{two * 1e3:.0f} ms ({two / one:.2f}x; 1.0 = fully parallel)")
    print()
    print("| concurrent episodes (grid_walk) | in-process steps/s | spade serve steps/s | ratio |")
    print("|---|---|---|---|")
    for n, ours_tp, served in throughput(args, runtime):
        print(f"| {n} | {ours_tp:,.0f} | {served:,.0f} | {ours_tp / served:.1f}x |")


if __name__ == "__main__":
    main()
