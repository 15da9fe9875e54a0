"""A TRL environment class that plays sandboxed environments in-process:
`GRPOTrainer(environment_factory=SandboxToolEnv.factory({"name": source}))`.

It has the surface of `spade_client.SpadeToolEnv` (the same class over `spade serve`): TRL
(1.16) creates instances from the factory, calls `reset(**row)` with the dataset row's columns
before each rollout, exposes every public method except `reset` and `get_reward` to the model
as a tool (here one, `reply`, read from its signature and docstring), and reads the rollout's
reward from `get_reward()`. The two classes differ only in where the sandbox runs.
"""

from __future__ import annotations

import functools
import itertools
import os
import weakref
from typing import Any, Callable, Dict, Optional

from . import errors
from ._api import Runtime

_episodes = itertools.count()


class SandboxToolEnv:
    """One spade episode, in an in-process sandbox, driven by a model through one tool, `reply`.

    `envs` maps an `env_id` to its environment source. `reset(**row)` reads `env_id` (default:
    the `env_id` given here, or the only one), `seed` (default 0), `hint` and `max_turns` from
    the dataset row (other columns, such as `prompt`, are TRL's and ignored) and returns the
    first observation. After each `reply`, `reward` is the last step's reward, `total_reward`
    their sum and `done` whether the episode ended. A sandbox limit (`out_of_fuel`, ...) ends
    the episode: `reply` returns the error text and `error_kind` names the outcome; an exception
    or a contract error of the environment is shown to the model and the episode goes on.
    With `record_dir`, every episode is recorded to `<record_dir>/<episode_id>.jsonl`.
    """

    RESET_FIELDS = ("env_id", "seed", "hint", "max_turns")

    def __init__(self, envs: Dict[str, str], runtime: Optional[Runtime] = None,
                 env_id: Optional[str] = None, record_dir: Optional[str] = None):
        if not envs:
            raise ValueError("SandboxToolEnv needs at least one environment source")
        self._envs = dict(envs)
        self._runtime = runtime
        self._default_env_id = env_id
        self._record_dir = record_dir
        # The sandboxed env, in a holder the finalizer can close without holding `self`: TRL
        # never calls `close`, and a recording must get its footer at the latest when the
        # instance is collected or the interpreter exits.
        self._holder: list = [None]
        self._finalizer = weakref.finalize(self, _close_holder, self._holder)
        self.reward = 0.0
        self.total_reward = 0.0
        self.done = False
        self.error_kind: Optional[str] = None
        self.episode_id: Optional[str] = None

    @classmethod
    def factory(cls, envs: Dict[str, str], runtime: Optional[Runtime] = None,
                env_id: Optional[str] = None,
                record_dir: Optional[str] = None) -> Callable[[], "SandboxToolEnv"]:
        """A zero-argument factory, as `environment_factory` expects: a `functools.partial`,
        picklable (as TRL's `AsyncGRPOTrainer` needs, which builds the environments in a spawned
        process) when `runtime` is None. The instances share one runtime (the process's default
        when `runtime` is None; a `Runtime` cannot be pickled)."""
        return functools.partial(cls, dict(envs), runtime=runtime, env_id=env_id,
                                 record_dir=record_dir)

    def _choose(self, env_id):
        if env_id is None:
            env_id = self._default_env_id
        if env_id is None:
            if len(self._envs) != 1:
                raise ValueError(
                    f"the row names no env_id and there are {len(self._envs)} environments: "
                    f"{', '.join(sorted(self._envs))}"
                )
            env_id = next(iter(self._envs))
        if env_id not in self._envs:
            raise ValueError(
                f"unknown env_id {env_id!r}: known are {', '.join(sorted(self._envs))}"
            )
        return env_id

    def reset(self, **kwargs: Any) -> str:
        fields = {k: kwargs[k] for k in self.RESET_FIELDS if kwargs.get(k) is not None}
        env_id = self._choose(fields.get("env_id"))
        seed = fields.get("seed", 0)
        self._close()
        if self._runtime is None:
            from . import default_runtime

            self._runtime = default_runtime()
        self.episode_id = f"{env_id}-{seed}-{os.getpid()}-{next(_episodes)}"
        record = None
        if self._record_dir is not None:
            record = os.path.join(self._record_dir, f"{self.episode_id}.jsonl")
        self._holder[0] = self._runtime.load(
            self._envs[env_id], seed=seed, max_turns=fields.get("max_turns"), record=record,
            hint=fields.get("hint"),
        )
        obs, _info = self._holder[0].reset(seed=seed)
        self.reward, self.total_reward, self.done, self.error_kind = 0.0, 0.0, False, None
        return obs

    def reply(self, message: str) -> str:
        """
        Send your reply to the environment and read what it answers.

        Args:
            message: Your full reply to the environment, for example your final answer in \\boxed{}.

        Returns:
            The environment's next observation.
        """
        env = self._holder[0]
        if self.done or env is None:
            return "The episode is over."
        try:
            obs, reward, terminated, truncated, _info = env.step(message)
        except (errors.EnvException, errors.ContractError) as err:
            return f"The environment failed on this reply: {err.detail}"
        except errors.SpadeError as err:
            self.done = True
            self.error_kind = err.kind
            self.reward = 0.0
            return f"The episode ended with an error: {err.detail}"
        self.reward = float(reward)
        self.total_reward += self.reward
        self.done = terminated or truncated
        return obs

    def get_reward(self) -> float:
        """The return of the current episode so far (the sum of its rewards), as TRL reads it."""
        return self.total_reward

    def _close(self) -> None:
        _close_holder(self._holder)

    # A property, not a method, so that TRL does not offer `close` to the model as a tool.
    @property
    def close(self) -> Callable[[], None]:
        """`env.close()` frees the sandbox and finishes the episode's recording."""
        return self._close

    def __enter__(self) -> "SandboxToolEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close()


def _close_holder(holder: list) -> None:
    env, holder[0] = holder[0], None
    if env is not None:
        env.close()


__all__ = ["SandboxToolEnv"]
