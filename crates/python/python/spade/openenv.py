"""OpenEnv (0.10): `SpadeEnvironment`, an `openenv` `Environment` over the in-process
runtime, and `create_app`, the FastAPI app OpenEnv's server code builds around it.

    from spade.openenv import create_app
    app = create_app({"grid_walk": source})          # uvicorn module:app, or uv run server

The wire format is `spade serve`'s: the action is `{"message": reply}`, the observation has
`text`, `info`, `terminated`, `truncated` (and `done`, `reward`), and `reset` takes `env_id`
(default: the only environment, or the one given here), `seed` and `max_turns`. Every session
(OpenEnv's `/ws`) gets its own `SpadeEnvironment`, and every `reset` a fresh sandbox, so
`SUPPORTS_CONCURRENT_SESSIONS` is true. An exception of the environment, a contract error or a
sandbox limit in `step` ends the episode: `done` with reward 0.0, the reason as `text` and in
`error` (`{"kind", "message"}`). An environment that fails to load or to reset raises, and
OpenEnv's server answers the error.

Install with `pip install spade-python[openenv]`.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any, Dict, Optional

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from . import errors


class SpadeAction(Action):
    """One reply to the environment."""

    message: str = Field(description="The reply, passed to the environment's step()")


class SpadeObservation(Observation):
    """What the environment answered (`done` = terminated or truncated, or an error)."""

    text: str = Field(default="", description="The observation text")
    info: Dict[str, Any] = Field(default_factory=dict, description="The environment's info")
    terminated: bool = False
    truncated: bool = False
    error: Optional[Dict[str, str]] = Field(
        default=None, description="{kind, message} when an error ended the episode")


class SpadeState(State):
    env_id: Optional[str] = None
    seed: Optional[int] = None
    done: bool = False


class SpadeEnvironment(Environment[SpadeAction, SpadeObservation, SpadeState]):
    """One session: `envs` maps an `env_id` to its environment source."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, envs: Dict[str, str], runtime=None, env_id: Optional[str] = None):
        super().__init__()
        if not envs:
            raise ValueError("SpadeEnvironment needs at least one environment source")
        self._envs = dict(envs)
        self._runtime = runtime
        self._default_env_id = env_id
        self._env = None
        self._state = SpadeState()

    def _choose(self, env_id):
        env_id = env_id if env_id is not None else self._default_env_id
        if env_id is None:
            if len(self._envs) != 1:
                raise ValueError(f"reset names no env_id and there are {len(self._envs)} "
                                 f"environments: {', '.join(sorted(self._envs))}")
            env_id = next(iter(self._envs))
        if env_id not in self._envs:
            raise ValueError(f"unknown env_id {env_id!r}: known are {', '.join(sorted(self._envs))}")
        return env_id

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              env_id: Optional[str] = None, max_turns: Optional[int] = None,
              **kwargs: Any) -> SpadeObservation:
        env_id = self._choose(env_id)
        seed = 0 if seed is None else seed
        self.close()
        if self._runtime is None:
            from . import default_runtime

            self._runtime = default_runtime()
        self._env = self._runtime.load(self._envs[env_id], seed=seed, max_turns=max_turns)
        text, info = self._env.reset(seed)
        self._state = SpadeState(episode_id=episode_id or str(uuid.uuid4()), step_count=0,
                                 env_id=env_id, seed=seed)
        return SpadeObservation(text=text, info=info, done=False, reward=None)

    def step(self, action: SpadeAction, timeout_s: Optional[float] = None,
             **kwargs: Any) -> SpadeObservation:
        if self._env is None:
            raise RuntimeError("call reset() before step()")
        if self._state.done:
            return SpadeObservation(text="The episode is over.", done=True, reward=0.0)
        self._state.step_count += 1
        try:
            text, reward, terminated, truncated, info = self._env.step(action.message)
        except errors.SpadeError as err:
            self._state.done = True
            return SpadeObservation(
                text=f"The episode ended with an error ({err.kind}): {err.detail}", done=True,
                reward=0.0, error={"kind": err.kind, "message": err.detail},
            )
        self._state.done = terminated or truncated
        return SpadeObservation(text=text, info=info, terminated=terminated,
                                truncated=truncated, done=self._state.done, reward=reward)

    @property
    def state(self) -> SpadeState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="spade",
            description="Model-written Python environments in spade's WebAssembly sandbox: "
                        + ", ".join(sorted(self._envs)),
            version="0.1.0",
        )

    def close(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            try:
                env.close()
            except errors.SpadeError:
                pass


def create_app(envs: Dict[str, str], max_concurrent_envs: int = 64,
               env_id: Optional[str] = None):
    """OpenEnv's FastAPI app (`openenv.core.env_server.create_app`) over `SpadeEnvironment`,
    one instance per session, at most `max_concurrent_envs` at once."""
    from openenv.core.env_server.http_server import create_app as openenv_create_app

    return openenv_create_app(
        functools.partial(SpadeEnvironment, dict(envs), env_id=env_id),
        SpadeAction, SpadeObservation, env_name="spade",
        max_concurrent_envs=max_concurrent_envs, state_cls=SpadeState,
    )


__all__ = ["SpadeEnvironment", "SpadeAction", "SpadeObservation", "SpadeState", "create_app"]
