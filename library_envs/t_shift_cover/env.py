import json
import random


class ShiftCoverEnv(ToolUseBaseEnv):
    """Tool use: find the one staff member who can cover a shift on a given day."""

    STAFF = ["nora", "raj", "ines", "tom", "yuki", "abe", "lola"]
    DAYS = ["mon", "tue", "wed", "thu", "fri", "sat"]
    SKILLS = ["till", "bakery", "delivery", "stock"]

    def __init__(self, max_turns=10):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_profile": {
                "description": "The days a staff member is available and the skills they have.",
                "parameters": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            },
        }
        staff = random.sample(self.STAFF, 5)
        day, skill = random.choice(self.DAYS), random.choice(self.SKILLS)
        cover = random.choice(staff)
        profiles = {}
        for name in staff:
            days = set(random.sample(self.DAYS, 3))
            skills = set(random.sample(self.SKILLS, 2))
            if name == cover:
                days.add(day)
                skills.add(skill)
            elif random.random() < 0.5:
                days.add(day)
                skills.discard(skill)
            else:
                days.discard(day)
            profiles[name] = {"days": sorted(days), "skills": sorted(skills)}
        self._state = {"profiles": profiles}
        self._expected_answer = cover
        obs = (
            "Staff: " + ", ".join(staff) + ". Exactly one of them is available on " + day
            + " and has the skill '" + skill + "'. Who can cover the shift? Answer with "
            "the name. Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"day": day, "skill": skill}

    def tool_get_profile(self, name):
        if name not in self._state["profiles"]:
            raise KeyError("no staff member named " + repr(name))
        return json.dumps(self._state["profiles"][name])
