import json
import random


class PeakReadingEnv(ToolUseBaseEnv):
    """Tool use: read a weather station's log page by page to find the hottest hour."""

    def __init__(self, max_turns=8):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "read_log": {
                "description": "The hourly temperature readings on one page of the log.",
                "parameters": {
                    "type": "object",
                    "properties": {"page": {"type": "integer"}},
                    "required": ["page"],
                },
            },
        }
        start = random.randint(6, 10)
        temps = random.sample(range(8, 31), 12)
        lines = ["hour " + str(start + i) + ": " + str(t) + " C"
                 for i, t in enumerate(temps)]
        pages = [lines[i:i + 4] for i in range(0, 12, 4)]
        self._state = {"pages": pages}
        self._expected_answer = str(start + temps.index(max(temps)))
        obs = (
            "The log holds one reading per hour from hour " + str(start) + " to hour "
            + str(start + 11) + ", on 3 pages (numbered from 1). At which hour was it "
            "hottest? Answer with the hour number. Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"start": start}

    def tool_read_log(self, page):
        pages = self._state["pages"]
        if not isinstance(page, int) or not 1 <= page <= len(pages):
            raise ValueError("page must be from 1 to " + str(len(pages)))
        return "\n".join(pages[page - 1])
