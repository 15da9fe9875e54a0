"""spade: run untrusted, model-written Python environments in-process, in a WebAssembly sandbox.

    import spade

    runtime = spade.Runtime()                    # once per process
    with runtime.load(source, seed=7) as env:    # one sandbox per environment instance
        obs, info = env.reset(seed=7)
        obs, reward, terminated, truncated, info = env.step("\\\\boxed{42}")

Each environment runs in RustPython compiled to WebAssembly under wasmtime, with fuel, memory
and deadline limits, and no files, network, clocks or entropy. Outcomes that are not results
raise the exceptions of `spade.errors`. `spade.compat.load_game_from_code` stands in for the
SPADE reference's `exec()` loader.
"""

from . import errors
from ._api import Env, Limits, Runtime
from ._native import GUEST_SHA256, VERSION
from .check import Finding, Verdict
from .errors import (
    CapacityError,
    ContractError,
    Deadline,
    EnvError,
    EnvException,
    GuestTrap,
    LoadError,
    MemoryLimit,
    OutOfFuel,
    SandboxDead,
    SandboxLimit,
    SpadeError,
    StackOverflow,
    UsageError,
)

__version__ = VERSION

_default_runtime = None


def default_runtime():
    """The process's shared `Runtime` with the default limits (built on first use)."""
    global _default_runtime
    if _default_runtime is None:
        _default_runtime = Runtime()
    return _default_runtime


def load(source, **options):
    """`default_runtime().load(source, **options)`."""
    return default_runtime().load(source, **options)


def check(source, **options):
    """`spade check` on `source` with the default runtime: returns a `Verdict`."""
    return default_runtime().check(source, **options)


def env_source(spec, package=None):
    """The source of an environment named like `spade run`'s argument: `rlve:NAME` (RLVE,
    from `pip install rlve-gym`), or `module:Class` with `package` (a directory)."""
    from ._native import env_source as _env_source

    return _env_source(spec, None if package is None else str(package))


__all__ = [
    "Runtime", "Env", "Limits", "Verdict", "Finding", "load", "check", "default_runtime",
    "env_source", "errors", "compat", "GUEST_SHA256", "__version__",
    "SpadeError", "EnvError", "LoadError", "ContractError", "EnvException", "SandboxLimit",
    "OutOfFuel", "Deadline", "MemoryLimit", "StackOverflow", "GuestTrap", "CapacityError",
    "SandboxDead", "UsageError",
]

from . import compat  # noqa: E402  (imports _api, which must come first)
