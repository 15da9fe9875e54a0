"""`Runtime`, `Env` and `Limits`: the in-process API over the native module."""

import dataclasses
import json
import sys

from . import _native
from .check import Verdict
from .errors import UsageError

_U64 = 1 << 64


@dataclasses.dataclass(frozen=True)
class Limits:
    """Limits of every sandbox of a runtime (docs/sandbox.md has each one's reasons).

    Fuel counts WebAssembly instructions (deterministic); sizes are bytes; `call_deadline` is
    seconds of the call's own running time, a safety net behind fuel.
    """

    fuel_per_call: int = _native.DEFAULT_LIMITS["fuel_per_call"]
    load_fuel: int = _native.DEFAULT_LIMITS["load_fuel"]
    memory_limit: int = _native.DEFAULT_LIMITS["memory_limit"]
    call_deadline: float = _native.DEFAULT_LIMITS["call_deadline"]
    output_limit: int = _native.DEFAULT_LIMITS["output_limit"]
    observation_limit: int = _native.DEFAULT_LIMITS["observation_limit"]
    info_limit: int = _native.DEFAULT_LIMITS["info_limit"]
    solution_limit: int = _native.DEFAULT_LIMITS["solution_limit"]
    tools_limit: int = _native.DEFAULT_LIMITS["tools_limit"]
    error_limit: int = _native.DEFAULT_LIMITS["error_limit"]


def _print_notice(line):
    print(line, file=sys.stderr, flush=True)


def _check_seed(seed, what):
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < _U64:
        raise ValueError(f"{what} must be an integer in [0, 2**64) or None, not {seed!r}")
    return seed


class Runtime:
    """The engine, the pre-initialised guest and the caches. Build one per process (it is
    thread-safe) and load every environment through it.

    The first runtime on a machine compiles the guest (about a minute, with a one-line notice
    on stderr) and caches it in `cache_dir`; later processes start in milliseconds.
    """

    def __init__(self, limits=None, cache_dir=None, pool_slots=None, snapshots=True):
        if limits is None:
            mapping = None
        elif isinstance(limits, Limits):
            mapping = dataclasses.asdict(limits)
        elif isinstance(limits, dict):
            mapping = dict(limits)
        else:
            raise TypeError(f"limits must be a spade.Limits or a dict, not {type(limits).__name__}")
        self._native = _native.Runtime(
            mapping,
            None if cache_dir is None else str(cache_dir),
            pool_slots,
            snapshots,
            notice=_print_notice,
        )

    @property
    def limits(self):
        """This runtime's `Limits`."""
        return Limits(**self._native.limits())

    @property
    def cache_dir(self):
        return self._native.cache_dir

    def load(self, source, *, seed=0, max_turns=None, record=None, hint=None):
        """Loads the environment `source` (Python text defining one `...Env` class) into a new
        sandbox and returns its `Env`.

        `seed` seeds the sandbox's randomness (and Python's `random`) before the source runs;
        `max_turns` is passed to the constructor when given; `record` is a file path the
        episode is recorded to (`spade replay PATH` reproduces it), with `hint` in its header.
        Raises `LoadError` (or a `SandboxLimit`) when the source cannot be loaded.
        """
        if not isinstance(source, str):
            raise TypeError(f"source must be str, not {type(source).__name__}")
        seed = _check_seed(seed, "seed")
        if seed is None:
            raise ValueError("seed must be an integer in [0, 2**64), not None")
        if max_turns is not None and (
            isinstance(max_turns, bool) or not isinstance(max_turns, int) or not 0 <= max_turns < 1 << 32
        ):
            raise ValueError(f"max_turns must be a non-negative integer or None, not {max_turns!r}")
        native = self._native.load(
            source,
            seed=seed,
            max_turns=max_turns,
            record=None if record is None else str(record),
            hint=hint,
        )
        return Env(native)

    def check(self, source, *, seeds=5, max_steps=30, fuel_budget=None):
        """`spade check` on `source`: the probes of the SPADE reference's validation and more.
        Returns a `Verdict`."""
        report, trajectories = self._native.check(
            source, seeds=seeds, max_steps=max_steps, fuel_budget=fuel_budget
        )
        return Verdict.from_report(json.loads(report), trajectories)


class Env:
    """One environment instance in its own sandbox, with the reference's interface:
    `reset(seed) -> (obs, info)`, `step(action) -> (obs, reward, terminated, truncated, info)`,
    `solution()` and `close()`. A context manager; `a`-prefixed coroutines run the same calls
    in a worker thread for asyncio agent loops. The GIL is released while the guest runs.
    """

    def __init__(self, native):
        self._native = native

    def reset(self, seed=None, **fields):
        """Calls `reset(seed=seed, **fields)`; the fields must be JSON values, and a field
        the environment's `reset` does not take is a `UsageError` (after the reset ran)."""
        seed = _check_seed(seed, "seed")
        fields_json = json.dumps(fields) if fields else None
        obs, info, dropped = self._native.reset(seed, fields_json)
        if dropped:
            raise UsageError(
                f"reset() of {self.class_name} does not take {', '.join(dropped)}: "
                "the field was not passed"
            )
        return obs, json.loads(info)

    def step(self, action):
        if not isinstance(action, str):
            raise TypeError(f"action must be str, not {type(action).__name__}")
        obs, reward, terminated, truncated, info = self._native.step(action)
        return obs, reward, terminated, truncated, json.loads(info)

    def solution(self):
        return self._native.solution()

    def close(self):
        """Calls the environment's `close()`, frees the sandbox and finishes a recording.
        Closing twice does nothing."""
        self._native.close()

    def fork(self, n=None, *, reseed=None, record=None, hint=None):
        """Copies of this environment in exactly its state: the same actions give the same
        observations, rewards, infos and fuel in a copy as here, and no copy sees another's
        calls. `fork()` returns one `Env`, `fork(n)` a list of `n`.

        `reseed`: None for exact copies (they draw this instance's very random numbers); an
        int (or, with `n`, a list of `n` ints, or None entries) seeds a copy's WASI entropy and
        module-global `random` anew. `record`: a path (with `n`, a list of `n` paths or None
        entries) the copy's trajectory is written to; it names this instance's recording as
        its parent, and `spade replay` replays the parent's calls up to the fork from it (this
        instance must be recorded). The GIL is released while the copies are made.

        Raises `UsageError` when the state cannot be copied: the sandbox is dead or closed, or
        the environment holds an open output stream (it printed)."""
        count = 1 if n is None else n
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"n must be a positive int, not {n!r}")
        reseeds = self._per_copy(reseed, n, "reseed")
        reseeds = [None if s is None else _check_seed(s, "reseed") for s in reseeds]
        records = self._per_copy(record, n, "record")
        records = [None if r is None else str(r) for r in records]
        natives = self._native.fork(reseeds, records, hint)
        copies = [Env(native) for native in natives]
        return copies[0] if n is None else copies

    @staticmethod
    def _per_copy(value, n, name):
        if n is None:
            return [value]
        if value is None:
            return [None] * n
        if isinstance(value, (list, tuple)):
            if len(value) != n:
                raise ValueError(f"{name} must have one entry per copy ({n}), not {len(value)}")
            return list(value)
        raise ValueError(f"with n, {name} must be a list of {n} entries (or None)")

    # asyncio is imported on first use: it is most of `import spade`'s time otherwise.
    async def afork(self, n=None, *, reseed=None, record=None, hint=None):
        import asyncio

        return await asyncio.to_thread(self.fork, n, reseed=reseed, record=record, hint=hint)

    async def areset(self, seed=None, **fields):
        import asyncio

        return await asyncio.to_thread(self.reset, seed, **fields)

    async def astep(self, action):
        import asyncio

        return await asyncio.to_thread(self.step, action)

    async def asolution(self):
        import asyncio

        return await asyncio.to_thread(self.solution)

    async def aclose(self):
        import asyncio

        await asyncio.to_thread(self.close)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()
        return False

    @property
    def class_name(self):
        return self._native.class_name

    @property
    def max_turns(self):
        """The environment's `max_turns` after construction (None when it is not an int)."""
        return self._native.max_turns

    @property
    def tools(self):
        """Tool schemas (OpenAI function format) of a tool-use environment, else None."""
        text = self._native.tools_json
        return None if text is None else json.loads(text)

    @property
    def last_fuel(self):
        return self._native.last_fuel

    @property
    def last_output(self):
        """`(stdout, stderr, dropped_bytes)` of the last call."""
        return self._native.last_output

    @property
    def dead(self):
        """Why the sandbox cannot be used ("out_of_fuel", ..., "closed"), or None."""
        return self._native.dead

    def __repr__(self):
        return f"<spade.Env {self.class_name}{' (' + self.dead + ')' if self.dead else ''}>"
