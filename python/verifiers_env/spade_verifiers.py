"""spade's environments as a verifiers taskset: `vf-eval spade-verifiers ...`.

The classes are `spade.verifiers`'s (see its documentation); this module is the name
verifiers' loader imports for the taskset id `spade-verifiers`.
"""

from spade.verifiers import (
    SpadeTaskset,
    SpadeTasksetConfig,
    SpadeVerifiersEnv,
    load_environment,
)

__all__ = ["SpadeTaskset", "SpadeVerifiersEnv", "SpadeTasksetConfig", "load_environment"]
