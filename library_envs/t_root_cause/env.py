import json
import random


class RootCauseEnv(ToolUseBaseEnv):
    """Tool use: trace a service outage down its dependencies to the root cause."""

    SERVICES = ["web", "api", "auth", "cache", "db", "queue", "search", "mail", "billing"]

    def __init__(self, max_turns=12):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_status": {
                "description": "Whether a service is 'up' or 'down'.",
                "parameters": {
                    "type": "object",
                    "properties": {"service": {"type": "string"}},
                    "required": ["service"],
                },
            },
            "get_dependencies": {
                "description": "The services a service needs in order to work.",
                "parameters": {
                    "type": "object",
                    "properties": {"service": {"type": "string"}},
                    "required": ["service"],
                },
            },
        }
        names = random.sample(self.SERVICES, len(self.SERVICES))
        chain = names[:random.randint(3, 4)]
        healthy = names[len(chain):]
        deps = {name: [] for name in names}
        for i, name in enumerate(chain):
            deps[name] = random.sample(healthy, random.randint(0, 2))
            if i + 1 < len(chain):
                deps[name].append(chain[i + 1])
            random.shuffle(deps[name])
        status = {name: "down" if name in chain else "up" for name in names}
        self._state = {"deps": deps, "status": status}
        self._expected_answer = chain[-1]
        obs = (
            "Service " + chain[0] + " is down. A service fails when any service it depends "
            "on is down. Which down service is the root cause (all its dependencies are up)? "
            "Answer with its name. Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"outage": chain[0]}

    def tool_get_status(self, service):
        return self._state["status"][service]

    def tool_get_dependencies(self, service):
        return ", ".join(self._state["deps"][service]) or "none"
