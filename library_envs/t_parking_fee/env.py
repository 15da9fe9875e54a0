import json
import math
import random


class ParkingFeeEnv(ToolUseBaseEnv):
    """Tool use: price a parking ticket from its times and its lot's hourly rates."""

    LOTS = ["north", "south", "station", "mall", "harbor"]

    def __init__(self, max_turns=8):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_ticket": {
                "description": "The ticket's lot and its entry and exit times (HH:MM).",
                "parameters": {
                    "type": "object",
                    "properties": {"ticket_id": {"type": "string"}},
                    "required": ["ticket_id"],
                },
            },
            "get_rates": {
                "description": "A lot's dollar price for the first and each later hour.",
                "parameters": {
                    "type": "object",
                    "properties": {"lot": {"type": "string"}},
                    "required": ["lot"],
                },
            },
        }
        rates = {lot: {"first_hour": random.choice([2.0, 2.5, 3.0, 4.0]),
                       "extra_hour": random.choice([1.0, 1.5, 2.0, 2.5])}
                 for lot in self.LOTS}
        start = random.randint(7 * 60, 12 * 60)
        stay = random.randint(20, 7 * 60)
        times = [str(t // 60).zfill(2) + ":" + str(t % 60).zfill(2)
                 for t in (start, start + stay)]
        lot = random.choice(self.LOTS)
        self.ticket_id = "T-" + str(random.randint(1000, 9999))
        self._state = {"ticket": {"lot": lot, "entry": times[0], "exit": times[1]},
                       "rates": rates}
        hours = math.ceil(stay / 60)
        fee = rates[lot]["first_hour"] + (hours - 1) * rates[lot]["extra_hour"]
        self._expected_answer = round(fee, 2)
        obs = (
            "How many dollars does parking ticket " + self.ticket_id + " cost? Every "
            "started hour is charged in full. Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"ticket_id": self.ticket_id}

    def tool_get_ticket(self, ticket_id):
        if ticket_id != self.ticket_id:
            raise KeyError("no ticket " + repr(ticket_id))
        return json.dumps(self._state["ticket"])

    def tool_get_rates(self, lot):
        return json.dumps(self._state["rates"][lot])
