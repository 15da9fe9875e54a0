"""A TRL-style environment class: `GRPOTrainer(environment_factory=SpadeToolEnv.factory(url))`.

TRL creates one instance per rollout, calls `reset(**row)` with the dataset row's columns and
exposes the public methods (here one: `reply`) to the model as tools, read from their
signatures and docstrings. A reward function reads `env.reward` of each environment.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

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
        self._client = None
        self.reward = 0.0
        self.total_reward = 0.0
        self.done = False
        self.error_kind: Optional[str] = None
        self.episode_id: Optional[str] = None

    @classmethod
    def factory(cls, base_url: str, token: Optional[str] = None, env_id: Optional[str] = None) -> Callable[[], "SpadeToolEnv"]:
        """A zero-argument factory, as `environment_factory` expects."""
        return lambda: cls(base_url, token=token, env_id=env_id)

    def _connect(self):
        if self._client is None:
            self._client = SpadeEnv(base_url=self._base_url, token=self._token).sync()
            self._client.connect()
        return self._client

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

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
