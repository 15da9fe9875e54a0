"""A drop-in for the SPADE reference's game loader, with the game in spade's sandbox.

The reference (spade-rl/spade, `SyntheticGameEnv._load_game_from_code`) runs a generated game
with `exec(code, module.__dict__)` in the trainer's own process. `load_game_from_code` keeps
that function's contract, as its documentation and behaviour describe it, and runs the code
in a sandbox instead:

1. The code runs as a module, with the names the reference injects (`random`, `re`, `math`,
   `json`, `itertools`, `collections`, `functools`, `heapq`, `statistics`, `copy`, `string`,
   the `typing` names and `ToolUseBaseEnv`). A syntax error is a `ValueError`
   ("Syntax error in generated game code: ..."); an exception while the module runs is a
   `RuntimeError` ("Failed to execute game code: ...").
2. The game class is the one class whose name ends in `Env`; none is a `ValueError`
   ("No valid game class found in code (expected class ending with 'Env')").
3. It is instantiated with `max_turns=max_steps`, or, with `respect_game_max_turns`, with its
   own default, and its designed `max_turns` is capped at `max_steps`. A constructor that
   raises is a `RuntimeError` ("Failed to instantiate game class: ...").
4. `reset(seed=42)`, the probe steps `\\boxed{1}`, `\\boxed{test}`, `\\boxed{42}` (until one
   ends the episode) and `reset(seed=123)` must work and return the reference's types, with
   rewards in [-10, 10]; otherwise a `RuntimeError` says which call failed, as the reference's.

The returned game has the reference game's interface (`reset`, `step`, `max_turns`, `close`,
`get_tools`, `execute_tool`, plus `solution`; a tool-use game's tool calls are played inside
`step`), so the reference's rollout code, its tool-use player included, calls it as it calls
the `exec`'d instance. Each error raised here chains the sandbox's
exception (`__cause__`), a subclass of `spade.SpadeError` with its `kind`.

Where the sandbox differs from `exec` (docs/python.md lists each with its cause):
- several classes ending in `Env` are refused (`ValueError`); the reference takes the first
  in the module's order. A base class and one subclass are fine: the subclass is the game.
- a constructor that takes no `max_turns` keeps its own `max_turns` attribute; the reference
  overwrites it with `max_steps` after construction.
- `info` dicts travel as JSON: tuples come back as lists and non-string keys as strings.
- limits: a call that runs out of fuel, memory or time raises a `spade.SandboxLimit` (the
  sandbox is then dead: load the game again), where `exec` would hang or take the process.
"""

import json

from . import errors
from ._api import Runtime

_TOOL_RESULT = "Tool result:\n"

PROBE_ACTIONS = ("\\boxed{1}", "\\boxed{test}", "\\boxed{42}")
"""The reference's probe steps."""

_runtime = None


def _default_runtime():
    global _runtime
    if _runtime is None:
        from . import default_runtime

        _runtime = default_runtime()
    return _runtime


def _is_max_turns_type_error(err):
    """The constructor refused the keyword `max_turns` (a TypeError naming it)."""
    return (
        isinstance(err, errors.EnvException)
        and "TypeError" in err.detail
        and "max_turns" in err.detail
    )


def _raise_load_error(err):
    """The reference's error for a failed load, chaining the sandbox's."""
    if isinstance(err, errors.LoadError):
        detail = err.detail
        if detail.startswith("syntax error"):
            raise ValueError(f"Syntax error in generated game code: {detail}") from err
        if detail.startswith("no environment class found"):
            raise ValueError(
                "No valid game class found in code (expected class ending with 'Env')"
            ) from err
        if detail.startswith("found ") and "environment classes" in detail:
            raise ValueError(f"Ambiguous game class: {detail}") from err
        raise RuntimeError(f"Failed to execute game code: {detail}") from err
    if isinstance(err, errors.EnvException):
        # The module ran; the constructor raised.
        raise RuntimeError(f"Failed to instantiate game class: {err.detail}") from err
    raise RuntimeError(f"Failed to execute game code: {err}") from err


class Game:
    """A loaded game: the reference game's interface over a sandboxed `spade.Env`."""

    def __init__(self, env):
        self._env = env

    @property
    def env(self):
        """The `spade.Env` underneath."""
        return self._env

    @property
    def max_turns(self):
        return self._env.max_turns

    @property
    def class_name(self):
        return self._env.class_name

    def reset(self, seed=None, **fields):
        return self._env.reset(seed, **fields)

    def step(self, action):
        return self._env.step(action)

    def solution(self):
        return self._env.solution()

    def get_tools(self):
        return self._env.tools or []

    def execute_tool(self, name, arguments):
        """Runs one tool call, as the reference's `ToolUseBaseEnv.execute_tool` does, and
        returns `{"output": str, "returncode": int}`: 0 with `str(result)` when the tool
        returned, 1 with the error text when the tool is unknown, raised, or the arguments are
        not a JSON object. It never raises for the call itself.

        The call is played inside the sandbox as the step
        `<tool_call>{"name": name, "arguments": arguments}</tool_call>`, so, unlike the
        reference's, it counts one turn of `max_turns` and its step reward (0.0 for a call that
        ran) is not seen. A sandbox limit (`out_of_fuel`, ...) ends the game: the output says
        so, with returncode 1, as every later call's does (`step` then raises
        `spade.SandboxDead`).
        """
        if not isinstance(name, str):
            return {"output": f"Error calling {name}: the tool name must be a string",
                    "returncode": 1}
        if not isinstance(arguments, dict):
            return {"output": f"Error calling {name}: arguments must be a JSON object, "
                              f"not {type(arguments).__name__}", "returncode": 1}
        try:
            payload = json.dumps({"name": name, "arguments": arguments})
        except (TypeError, ValueError) as err:
            return {"output": f"Error calling {name}: {err}", "returncode": 1}
        # `<` only occurs inside JSON strings; escaped, no argument can close the tag or look
        # like an `<answer>` to the step's parser.
        payload = payload.replace("<", "\\u003c")
        try:
            obs, _reward, _terminated, _truncated, _info = self._env.step(
                f"<tool_call>{payload}</tool_call>"
            )
        except errors.SpadeError as err:
            return {"output": f"Error calling {name}: the game ended with an error: {err}",
                    "returncode": 1}
        if obs.startswith(_TOOL_RESULT):
            return {"output": obs[len(_TOOL_RESULT):], "returncode": 0}
        return {"output": obs, "returncode": 1}

    def close(self):
        self._env.close()

    def __repr__(self):
        return f"<spade.compat.Game {self.class_name}>"


def _load(runtime, code, seed, max_turns):
    try:
        return runtime.load(code, seed=seed, max_turns=max_turns)
    except errors.SpadeError as err:
        return err


def _instantiate(runtime, code, max_steps, respect_game_max_turns, seed):
    """Steps 1-3: the game instance, with the reference's `max_turns` rules."""
    if respect_game_max_turns:
        env = _load(runtime, code, seed, None)
        if _is_max_turns_type_error(env):
            env = _load(runtime, code, seed, max_steps)
        if isinstance(env, errors.SpadeError):
            _raise_load_error(env)
        designed = env.max_turns
        if designed is None or designed <= 0 or designed > max_steps:
            # Capped (or set) at the budget: constructed again with it, as the contract's
            # constructors take `max_turns`.
            env.close()
            env = _load(runtime, code, seed, max_steps if designed is None or designed <= 0
                        else min(designed, max_steps))
            if isinstance(env, errors.SpadeError):
                _raise_load_error(env)
        return env
    env = _load(runtime, code, seed, max_steps)
    if _is_max_turns_type_error(env):
        env = _load(runtime, code, seed, None)
    if isinstance(env, errors.SpadeError):
        _raise_load_error(env)
    return env


def _validate(env):
    """Step 4: the reference's execution probes."""
    try:
        obs, info = env.reset(seed=42)
        if not isinstance(obs, str) or len(obs) == 0:
            raise ValueError("reset() returned empty or non-string observation")
    except Exception as err:
        raise RuntimeError(f"Game reset() failed: {err}") from err
    for i, action in enumerate(PROBE_ACTIONS):
        try:
            obs, reward, terminated, truncated, info = env.step(action)
            if reward < -10 or reward > 10:
                raise ValueError(f"step() reward {reward} outside expected range [-10, 10]")
            if terminated or truncated:
                break
        except Exception as err:
            raise RuntimeError(f"Game step() failed on action {i + 1} '{action}': {err}") from err
    try:
        env.reset(seed=123)
    except Exception as err:
        raise RuntimeError(f"Game reset() failed on second call: {err}") from err


def load_game_from_code(code, max_steps=1000, respect_game_max_turns=False, *, runtime=None,
                        seed=0):
    """Loads and validates a generated game as the reference's `_load_game_from_code` does,
    in a sandbox; returns a `Game`. `runtime` defaults to `spade.default_runtime()`; `seed`
    seeds the sandbox before the code runs (the reference leaves `random` as it finds it)."""
    if not code:
        raise ValueError("No game code provided")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 0:
        raise ValueError(f"max_steps must be a non-negative integer, not {max_steps!r}")
    runtime = runtime if runtime is not None else _default_runtime()
    if not isinstance(runtime, Runtime):
        raise TypeError(f"runtime must be a spade.Runtime, not {type(runtime).__name__}")
    env = _instantiate(runtime, code, max_steps, respect_game_max_turns, seed)
    try:
        _validate(env)
    except BaseException:
        # The validation error is what the caller needs; a close() that fails as well (the
        # game's own close raising) must not replace it.
        try:
            env.close()
        except errors.SpadeError:
            pass
        raise
    return Game(env)


REFERENCE_MODULE = "spare.core.envs.synthetic_game_env"
"""Where the reference defines `SyntheticGameEnv`, whose `_load_game_from_code` `patch_reference`
replaces."""


def patch_reference(module=REFERENCE_MODULE):
    """Makes the reference's `SyntheticGameEnv._load_game_from_code` (an instance method, called
    as `self._load_game_from_code(code, max_steps=..., respect_game_max_turns=...)`) load games
    with `load_game_from_code`, in this process. Call it once at the top of the trainer's entry
    script: `import spade.compat; spade.compat.patch_reference()` (Ray workers: the
    `runtime_env` `{"worker_process_setup_hook": "spade.compat.patch_reference"}`). Returns the
    patched class; a module without `SyntheticGameEnv` is an `AttributeError`."""
    import importlib

    mod = importlib.import_module(module)
    cls = getattr(mod, "SyntheticGameEnv", None)
    if cls is None:
        raise AttributeError(f"module {module!r} has no SyntheticGameEnv to patch")

    def _load_game_from_code(self, code, max_steps=1000, respect_game_max_turns=False):
        return load_game_from_code(code, max_steps=max_steps,
                                   respect_game_max_turns=respect_game_max_turns)

    cls._load_game_from_code = _load_game_from_code
    return cls


__all__ = ["load_game_from_code", "Game", "PROBE_ACTIONS", "patch_reference", "REFERENCE_MODULE"]
