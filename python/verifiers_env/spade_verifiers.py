"""spade's environments for verifiers, by the id `spade-verifiers`.

With verifiers 0.4 (the v1 API), `vf-eval spade-verifiers ...` finds the taskset and env that
this module exports (`spade.verifiers`); with verifiers 0.3.x, `vf.load_environment(
"spade-verifiers", envs=..., seeds=...)` calls `load_environment` here, which returns the
legacy `MultiTurnEnv` (`spade.verifiers_legacy`). The arguments are the same in both.
"""

from importlib.metadata import version

_LEGACY = tuple(int(p) for p in version("verifiers").split(".")[:2]) < (0, 4)

if _LEGACY:
    from spade.verifiers_legacy import load_environment

    __all__ = ["load_environment"]
else:
    from spade.verifiers import (
        SpadeTaskset,
        SpadeTasksetConfig,
        SpadeVerifiersEnv,
        load_environment,
    )

    __all__ = ["SpadeTaskset", "SpadeVerifiersEnv", "SpadeTasksetConfig", "load_environment"]
