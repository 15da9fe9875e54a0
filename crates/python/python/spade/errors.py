"""The exceptions spade raises: one hierarchy, every instance with the outcome's `kind`.

    SpadeError
    ├── EnvError            the environment's own fault (show it to whoever wrote it)
    │   ├── LoadError       syntax error, no or several ...Env classes, an import that failed
    │   ├── ContractError   a value of the wrong shape or size came back
    │   └── EnvException    the environment raised; `traceback` is the guest's traceback text
    ├── SandboxLimit        a host limit ended the call; the sandbox is dead afterwards
    │   ├── OutOfFuel, Deadline, MemoryLimit, StackOverflow, GuestTrap
    ├── SandboxDead         a call on a sandbox that an earlier limit ended (`reason` says which)
    ├── CapacityError       no free sandbox slot in the runtime's pool
    └── UsageError          calls in the wrong order (step after close, ...)

`kind` is the stable snake_case name of `spade run --json` and trajectory files
("out_of_fuel", "exception", ...); `detail` is the message without its prefix (for
`EnvException`, the Python traceback).
"""


class SpadeError(Exception):
    """Base class of every sandbox outcome that is not a result."""

    kind = "error"

    def __init__(self, message, kind=None, detail=None):
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind
        self.detail = message if detail is None else detail


class EnvError(SpadeError):
    """The environment's own fault. The sandbox stays usable after a contract error or an
    exception (a load error leaves no sandbox)."""


class LoadError(EnvError):
    kind = "load"


class ContractError(EnvError):
    kind = "contract"


class EnvException(EnvError):
    kind = "exception"

    @property
    def traceback(self):
        """The traceback as the guest printed it."""
        return self.detail


class SandboxLimit(SpadeError):
    """A limit the host enforced ended the call; the sandbox is dead and already freed."""


class OutOfFuel(SandboxLimit):
    kind = "out_of_fuel"


class Deadline(SandboxLimit):
    kind = "deadline"


class MemoryLimit(SandboxLimit):
    kind = "memory_limit"


class StackOverflow(SandboxLimit):
    kind = "stack_overflow"


class GuestTrap(SandboxLimit):
    kind = "guest_trap"


class CapacityError(SpadeError):
    kind = "capacity"


class SandboxDead(SpadeError):
    """The sandbox was ended by an earlier limit (or an interrupted call)."""

    kind = "dead"

    @property
    def reason(self):
        """The kind of the outcome that ended the sandbox ("out_of_fuel", "cancelled", ...)."""
        return self.detail


class UsageError(SpadeError):
    kind = "usage"


__all__ = [
    "SpadeError", "EnvError", "LoadError", "ContractError", "EnvException", "SandboxLimit",
    "OutOfFuel", "Deadline", "MemoryLimit", "StackOverflow", "GuestTrap", "CapacityError",
    "SandboxDead", "UsageError",
]
