"""Python client for `spade serve`, the sandbox as an OpenEnv-compatible service.

- `SpadeEnv`: a typed client on top of `openenv`'s `EnvClient` (WebSocket sessions).
- `SpadeToolEnv`: a TRL-style environment class (one tool, `reply`, that sends the model's
  reply and returns the observation), for `GRPOTrainer(environment_factory=...)`.
- `register_env`, `list_envs`, `fetch_trajectory`: spade's HTTP extensions.
- `spade_client.ray_cluster`: one `spade serve` per Ray node, sessions spread over them.

Stock OpenEnv clients work too: `GenericEnvClient(base_url=url)`, `reset(env_id=..., seed=...)`,
`step({"message": reply})`.
"""

from .client import (
    Registration,
    SpadeAction,
    SpadeEnv,
    SpadeObservation,
    SpadeServerError,
    SpadeState,
    fetch_trajectory,
    list_envs,
    register_env,
)
from .trl import SpadeToolEnv

__all__ = [
    "Registration",
    "SpadeAction",
    "SpadeEnv",
    "SpadeObservation",
    "SpadeServerError",
    "SpadeState",
    "SpadeToolEnv",
    "fetch_trajectory",
    "list_envs",
    "register_env",
]
