"""A TRL environment class: `GRPOTrainer(environment_factory=SpadeToolEnv.factory(url))`.

TRL (1.16) creates instances from the factory, pools them, calls `reset(**row)` with the dataset
row's columns before each rollout, and exposes every public method of the class except `reset`
and `get_reward` to the model as a tool, read from its signature and docstring. Here that is
one tool, `reply`. TRL reads the rollout's reward from `get_reward()`. It never calls `close`,
so the session is released when TRL drops the instance (or at `close()`, or on leaving a
`with` block).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, List, Optional

from .client import SpadeAction, SpadeEnv, SpadeServerError


class SpadeToolEnv:
    """One spade episode driven by a model through one tool, `reply`.

    `reset(**row)` reads `env_id`, `seed`, `hint` and `max_turns` from the dataset row (other
    columns, such as `prompt`, are TRL's and ignored) and returns the first observation.
    After each `reply`, `reward` is the last step's reward, `total_reward` their sum and
    `done` whether the episode ended. A sandbox failure (`out_of_fuel`, ...) ends the episode:
    `reply` returns the error text and `error_kind` names the outcome.
    """

    RESET_FIELDS = ("env_id", "seed", "hint", "max_turns")

    def __init__(self, base_url: str, token: Optional[str] = None, env_id: Optional[str] = None):
        self._base_url = base_url
        self._token = token
        self._default_env_id = env_id
        # The connected client, in a holder the finalizer can close without holding `self`.
        self._holder: List[Any] = [None]
        self._finalizer = weakref.finalize(self, _close_holder, self._holder)
        self.reward = 0.0
        self.total_reward = 0.0
        self.done = False
        self.error_kind: Optional[str] = None
        self.episode_id: Optional[str] = None

    @classmethod
    def factory(cls, base_url: str, token: Optional[str] = None, env_id: Optional[str] = None) -> Callable[[], "SpadeToolEnv"]:
        """A zero-argument factory, as `environment_factory` expects: a `functools.partial`,
        picklable, as TRL's `AsyncGRPOTrainer` needs (it builds the environments in a spawned
        process)."""
        return functools.partial(cls, base_url, token=token, env_id=env_id)

    def _connect(self):
        if self._holder[0] is None:
            client = SpadeEnv(base_url=self._base_url, token=self._token).sync()
            client.connect()
            self._holder[0] = client
        return self._holder[0]

    def reset(self, **kwargs: Any) -> str:
        fields = {k: kwargs[k] for k in self.RESET_FIELDS if kwargs.get(k) is not None}
        if "env_id" not in fields and self._default_env_id is not None:
            fields["env_id"] = self._default_env_id
        result = self._connect().reset(**fields)
        self.reward, self.total_reward, self.done, self.error_kind = 0.0, 0.0, False, None
        self.episode_id = result.observation.episode_id
        return result.observation.text

    def reply(self, message: str) -> str:
        """
        Send your reply to the environment and read what it answers.

        Args:
            message: Your full reply to the environment, for example your final answer in \\boxed{}.

        Returns:
            The environment's next observation.
        """
        if self.done:
            return "The episode is over."
        try:
            result = self._connect().step(SpadeAction(message))
        except SpadeServerError as err:
            if err.code == "EXECUTION_ERROR" and err.kind in ("exception", "contract"):
                return f"The environment failed on this reply: {err.message}"
            self.done = True
            self.error_kind = err.kind or err.code
            self.reward = 0.0
            return f"The episode ended with an error: {err.message}"
        self.reward = float(result.reward or 0.0)
        self.total_reward += self.reward
        self.done = bool(result.done)
        return result.observation.text

    def get_reward(self) -> float:
        """The return of the current episode so far (the sum of its rewards), as TRL reads it."""
        return self.total_reward

    def _close(self) -> None:
        _close_holder(self._holder)

    # A property, not a method, so that TRL does not offer `close` to the model as a tool.
    @property
    def close(self) -> Callable[[], None]:
        """`env.close()` ends the session (its slot on the server is free again)."""
        return self._close

    def __enter__(self) -> "SpadeToolEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._close()


def _close_holder(holder: List[Any]) -> None:
    client, holder[0] = holder[0], None
    if client is not None:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - the connection may already be gone
            pass
