"""SkyRL (skyrl-gym 0.4): `SpadeTextEnv`, a `BaseTextEnv` over one sandboxed environment,
registered as `spade` with `skyrl_gym.envs.register` on import.

    import skyrl_gym, spade.skyrl
    env = skyrl_gym.make("spade", env_config=None, extras={"env": "rlve:Multiplication",
                                                            "seed": 3})

A SkyRL dataset row names its environment class (`env_class: spade`) and passes its other
fields as `extras`: `env` (`rlve:NAME`, a `.py` path or source text), `seed` (default 0) and
`max_turns`. `init(prompt)` loads the environment into a fresh sandbox and answers the row's
prompt followed by the first observation (a user message); each `step(reply)` answers the next
observation, the step's reward and `done` (terminated or truncated). An exception of the
environment, a contract error or a sandbox limit ends the episode (`done`, reward 0.0) with the
reason as the observation and in `metadata["spade_error"]`.

Install with `pip install spade-python[skyrl]`.
"""

from __future__ import annotations

from typing import Any, Dict

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register, registry

from . import errors

ENV_ID = "spade"
"""The id `SpadeTextEnv` is registered under (a row's `env_class`)."""


class SpadeTextEnv(BaseTextEnv):
    """One episode of a sandboxed environment, as SkyRL's text environments play."""

    def __init__(self, env_config: Any = None, extras: Dict[str, Any] = None, runtime=None):
        super().__init__()
        extras = dict(extras or {})
        if "env" not in extras:
            raise ValueError("the spade SkyRL environment needs extras['env'] "
                             "(rlve:NAME, a .py path or the source)")
        from ._sources import resolve_source

        self._source = resolve_source(extras["env"])
        self._seed = int(extras.get("seed", 0))
        self._env_max_turns = extras.get("max_turns")
        self._runtime = runtime
        self._env = None
        self.total_reward = 0.0
        # SkyRL's own cap on turns; the environment's `max_turns` (truncation) ends it first.
        self.max_turns = int(extras.get("max_chat_turns", 1 << 30))

    def init(self, prompt):
        if self._runtime is None:
            from . import default_runtime

            self._runtime = default_runtime()
        self._env = self._runtime.load(self._source, seed=self._seed,
                                       max_turns=self._env_max_turns)
        obs, _info = self._env.reset(self._seed)
        return list(prompt or []) + [{"role": "user", "content": obs}], {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        try:
            obs, reward, terminated, truncated, info = self._env.step(action)
        except errors.SpadeError as err:
            text = f"The episode ended with an error ({err.kind}): {err.detail}"
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": text}], reward=0.0, done=True,
                metadata={"spade_error": err.kind, "spade_error_detail": err.detail},
            )
        self.total_reward += float(reward)
        done = bool(terminated or truncated) or self.turns >= self.max_turns
        return BaseTextEnvStepOutput(
            observations=[] if done else [{"role": "user", "content": obs}],
            reward=float(reward), done=done,
            metadata={"info": info, "terminated": terminated, "truncated": truncated,
                      "observation": obs},
        )

    def get_metrics(self) -> Dict[str, Any]:
        return {"spade_return": self.total_reward}

    def close(self):
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            except errors.SpadeError:
                pass


if ENV_ID not in registry:
    register(id=ENV_ID, entry_point="spade.skyrl:SpadeTextEnv")

__all__ = ["SpadeTextEnv", "ENV_ID"]
