import math


class HugeInfoEnv(ToolUseBaseEnv):
    """Tool use whose info holds an int beyond f64's range: math.factorial(200), 375 digits
    (issue 53/5: the MCP path panicked on it)."""

    def __init__(self, max_turns=4):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "big": {
                "description": "Says ok.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
        self._expected_answer = "ok"
        return self._task_observation(), {"big": math.factorial(200)}

    def tool_big(self):
        return "ok"

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, dict(info, big=math.factorial(200))
