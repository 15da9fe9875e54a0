"""Gymnasium (1.x): `spade.gym.SpadeEnv`, a `gymnasium.Env` over one sandboxed environment.

    import gymnasium, spade.gym

    env = spade.gym.SpadeEnv(source)                      # or env="rlve:Name"
    obs, info = env.reset(seed=7)
    obs, reward, terminated, truncated, info = env.step("\\\\boxed{42}")
    envs = gymnasium.vector.SyncVectorEnv([lambda: spade.gym.SpadeEnv(source)] * 4)
    gymnasium.make("spade/Sandbox-v0", source=source)     # registered on import

Observations and actions are strings (`Text` spaces that hold any Unicode text up to the
runtime's size limits). Every `reset` loads the environment into a fresh sandbox, so episodes
share no state: `reset(seed=s)` plays as `spade run --seed s` does (the sandbox and the
environment's `reset` both get `s`); `reset()` draws the seed from `self.np_random`.
`options` are passed to the environment's `reset` as keyword arguments where its `reset` takes
them, and dropped where it does not. An exception of the environment, a contract error or a
sandbox limit in `step` ends the episode (`truncated=True`, reward 0.0) with the reason as the
observation and in `info["spade_error"]` (the kind) and `info["spade_error_detail"]`.

Install with `pip install spade-python[gymnasium]`.
"""

from __future__ import annotations

import json
import string
from typing import Any, Optional

import gymnasium
from gymnasium import spaces

from . import errors

_SEED_BOUND = 1 << 63


class AnyText(spaces.Text):
    """A `Text` space that contains every `str` of at most `max_length` characters (the stock
    `Text` only holds its charset's). Samples are printable ASCII."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed=None):
        super().__init__(max_length, min_length=min_length, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __eq__(self, other: Any) -> bool:
        return (isinstance(other, AnyText) and self.min_length == other.min_length
                and self.max_length == other.max_length)

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"


class SpadeEnv(gymnasium.Env):
    """One spade environment as a `gymnasium.Env`. Give the environment as `source` (Python
    text) or as `env`, a `spade run` name (`rlve:NAME`, or `module:Class` with `package`).
    `max_turns` is passed to its constructor; `runtime` defaults to `spade.default_runtime()`.
    """

    metadata = {"render_modes": []}

    def __init__(self, source: Optional[str] = None, *, env: Optional[str] = None,
                 package: Optional[str] = None, max_turns: Optional[int] = None,
                 runtime=None, render_mode: Optional[str] = None):
        if (source is None) == (env is None):
            raise ValueError("SpadeEnv takes exactly one of source (Python text) and env "
                             "(a name such as 'rlve:Name')")
        if render_mode is not None:
            raise ValueError(f"SpadeEnv has no render modes, not {render_mode!r}")
        if source is None:
            from . import env_source

            source = env_source(env, package)
        if runtime is None:
            from . import default_runtime

            runtime = default_runtime()
        self._source = source
        self._max_turns = max_turns
        self._runtime = runtime
        self._env = None
        self._ended = None
        limits = runtime.limits
        self.observation_space = AnyText(max(limits.observation_limit, limits.error_limit + 256))
        self.action_space = AnyText(limits.observation_limit)
        self.render_mode = None

    @property
    def spade_env(self):
        """The `spade.Env` of the current episode (None before the first `reset`)."""
        return self._env

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(0, _SEED_BOUND))
        fields = None
        if options:
            if not isinstance(options, dict):
                raise TypeError(f"options must be a dict, not {type(options).__name__}")
            try:
                fields = json.dumps(options)
            except (TypeError, ValueError) as err:
                raise ValueError(f"options must be JSON values: {err}") from None
        self._close_env()
        self._env = self._runtime.load(self._source, seed=seed, max_turns=self._max_turns)
        self._ended = None
        # The native call reports the fields the environment's reset does not take, instead of
        # raising as `spade.Env.reset` does: here they are dropped by design.
        obs, info, _dropped = self._env._native.reset(seed, fields)
        return obs, json.loads(info)

    def step(self, action: str):
        if self._env is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        if self._ended is not None:
            return self._ended
        try:
            obs, reward, terminated, truncated, info = self._env.step(action)
        except errors.SpadeError as err:
            if isinstance(err, errors.UsageError):
                raise
            self._ended = (
                f"The episode ended with an error ({err.kind}): {err.detail}", 0.0, False, True,
                {"spade_error": err.kind, "spade_error_detail": err.detail},
            )
            return self._ended
        return obs, float(reward), bool(terminated), bool(truncated), info

    def solution(self) -> str:
        """The environment's `solution()` for the current episode."""
        if self._env is None:
            raise gymnasium.error.ResetNeeded("call reset() before solution()")
        return self._env.solution()

    def _close_env(self):
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            except errors.SpadeError:
                pass  # a dead sandbox or the environment's own close raising: it is gone

    def close(self):
        self._close_env()
        super().close()


ENV_ID = "spade/Sandbox-v0"
"""The id `SpadeEnv` is registered under: `gymnasium.make(ENV_ID, source=...)`."""


def register(env_id: str, source: Optional[str] = None, *, env: Optional[str] = None,
             **kwargs) -> None:
    """Registers one environment under its own id, so `gymnasium.make(env_id)` builds it."""
    gymnasium.register(id=env_id, entry_point="spade.gym:SpadeEnv",
                       kwargs={"source": source, "env": env, **kwargs})


if ENV_ID not in gymnasium.registry:
    gymnasium.register(id=ENV_ID, entry_point="spade.gym:SpadeEnv")

__all__ = ["SpadeEnv", "AnyText", "register", "ENV_ID"]
