import json
import random


class RecipeScaleEnv(ToolUseBaseEnv):
    """Tool use: scale one ingredient of a recipe to a new number of servings."""

    DISHES = ["pancakes", "risotto", "curry", "brownies", "lasagne"]
    INGREDIENTS = ["flour", "rice", "sugar", "butter", "cheese", "onion", "tomato"]

    def __init__(self, max_turns=6):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {
            "get_recipe": {
                "description": "A dish's servings and the grams of each ingredient it uses.",
                "parameters": {
                    "type": "object",
                    "properties": {"dish": {"type": "string"}},
                    "required": ["dish"],
                },
            },
        }
        recipes, per = {}, {}
        for dish in self.DISHES:
            serves = random.choice([2, 4, 6])
            per[dish] = {i: 5 * random.randint(2, 16)
                         for i in random.sample(self.INGREDIENTS, 3)}
            grams = {i: g * serves for i, g in per[dish].items()}
            recipes[dish] = {"serves": serves, "grams": grams}
        dish = random.choice(self.DISHES)
        item = random.choice(sorted(per[dish]))
        guests = random.randint(3, 12)
        self._state = {"recipes": recipes}
        self._expected_answer = per[dish][item] * guests
        obs = (
            "You are cooking " + dish + " for " + str(guests) + " people. How many grams "
            "of " + item + " do you need? Tools: " + json.dumps(self.get_tools())
        )
        return obs, {"dish": dish}

    def tool_get_recipe(self, dish):
        if dish not in self._state["recipes"]:
            raise KeyError("no recipe for " + repr(dish))
        return json.dumps(self._state["recipes"][dish])
