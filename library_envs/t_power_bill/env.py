import json
import random


class PowerBillEnv(ToolUseBaseEnv):
    """Tool use: find the appliance whose extra use explains a jump in the power bill."""

    APPLIANCES = ["heater", "fridge", "dryer", "oven", "tv", "kettle", "pump", "aircon"]

    def __init__(self, max_turns=10):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_usage": {
                "description": "An appliance's use in kWh last month and this month.",
                "parameters": {
                    "type": "object",
                    "properties": {"appliance": {"type": "string"}},
                    "required": ["appliance"],
                },
            },
        }
        names = random.sample(self.APPLIANCES, 6)
        cause = random.choice(names)
        usage = {}
        for name in names:
            before = random.randint(20, 150)
            change = random.randint(60, 140) if name == cause else random.randint(-15, 10)
            usage[name] = [before, before + change]
        self._state = {"usage": usage}
        self._expected_answer = cause
        obs = (
            "This month's power bill jumped. Appliances: " + ", ".join(names) + ". "
            "Which one's use rose the most in kWh? Answer with its name. "
            "Tools: " + json.dumps(self.get_tools())
        )
        return obs, {}

    def tool_get_usage(self, appliance):
        if appliance not in self._state["usage"]:
            raise KeyError("no appliance named " + repr(appliance))
        before, now = self._state["usage"][appliance]
        return "last month: " + str(before) + " kWh, this month: " + str(now) + " kWh"
