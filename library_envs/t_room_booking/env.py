import json
import random


class RoomBookingEnv(ToolUseBaseEnv):
    """Tool use: find the one meeting room still free at a given hour."""

    ROOMS = ["oak", "elm", "pine", "birch", "cedar", "maple"]

    def __init__(self, max_turns=10):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_bookings": {
                "description": "The hours (24-hour clock) at which a room is booked.",
                "parameters": {
                    "type": "object",
                    "properties": {"room": {"type": "string"}},
                    "required": ["room"],
                },
            },
        }
        rooms = random.sample(self.ROOMS, 5)
        hour = random.randint(9, 16)
        free = random.choice(rooms)
        bookings = {}
        for room in rooms:
            hours = set(random.sample(range(9, 17), random.randint(2, 5)))
            if room == free:
                hours.discard(hour)
            else:
                hours.add(hour)
            bookings[room] = sorted(hours)
        self._state = {"bookings": bookings}
        self._expected_answer = free
        obs = (
            "Rooms: " + ", ".join(rooms) + ". Exactly one of them is free at "
            + str(hour) + ":00. Which one? Answer with the room's name. "
            "Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"hour": hour}

    def tool_get_bookings(self, room):
        if room not in self._state["bookings"]:
            raise KeyError("no room named " + repr(room))
        return ", ".join(str(h) + ":00" for h in self._state["bookings"][room])
