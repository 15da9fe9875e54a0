import json
import random


class EarliestArrivalEnv(ToolUseBaseEnv):
    """Tool use: pick the flight that lands first, from departure times and durations."""

    CITIES = ["oslo", "rome", "lima", "cairo", "quito", "perth"]

    def __init__(self, max_turns=10):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "list_flights": {
                "description": "Codes of the direct flights from one city to another.",
                "parameters": {
                    "type": "object",
                    "properties": {"origin": {"type": "string"}, "destination": {"type": "string"}},
                    "required": ["origin", "destination"],
                },
            },
            "get_flight": {
                "description": "A flight's departure time (HH:MM) and duration in minutes.",
                "parameters": {
                    "type": "object",
                    "properties": {"code": {"type": "string"}},
                    "required": ["code"],
                },
            },
        }
        self.route = tuple(random.sample(self.CITIES, 2))
        codes = random.sample(range(100, 999), 4)
        arrivals = random.sample(range(600, 1300, 5), 4)
        flights = {}
        for code, arrive in zip(codes, arrivals):
            minutes = random.randint(60, 400)
            depart = arrive - minutes
            flights["FL" + str(code)] = {
                "departs": "%02d:%02d" % (depart // 60, depart % 60),
                "minutes": minutes,
            }
        self._state = {"flights": flights}
        first = min(zip(arrivals, flights))[1]
        self._expected_answer = first
        obs = (
            "Which direct flight from " + self.route[0] + " to " + self.route[1]
            + " arrives earliest? Answer with its code. Tools: " + json.dumps(self.get_tools())
        )
        return obs, {}

    def tool_list_flights(self, origin, destination):
        if (origin.lower(), destination.lower()) != self.route:
            return "no direct flights"
        return ", ".join(self._state["flights"])

    def tool_get_flight(self, code):
        return self._state["flights"][code.upper()]
