import itertools
import random
import re

PEOPLE = ["Ann", "Ben", "Cara", "Dan"]
PETS = ["cat", "dog", "fish", "parrot"]


class PetOwnerEnv:
    """Single answer: match four people to four pets from clues and name one owner."""

    def __init__(self, max_turns=1, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        owner = PETS[:]
        random.shuffle(owner)
        cands = list(itertools.permutations(PETS))
        clues = []
        while len(cands) > 1:
            i, j = random.sample(range(4), 2)
            if random.random() < 0.6:
                p = random.choice([q for q in PETS if q != owner[i]])
                text = PEOPLE[i] + " does not own the " + p + "."
                keep = [c for c in cands if c[i] != p]
            else:
                p = owner[i]
                text = "The " + p + " belongs to " + PEOPLE[min(i, j)] + " or " + PEOPLE[max(i, j)] + "."
                keep = [c for c in cands if p in (c[i], c[j])]
            if len(keep) < len(cands):
                cands = keep
                clues.append(text)
        pet = random.choice(PETS)
        self.answer = PEOPLE[owner.index(pet)]
        self.turn_count = 0
        obs = (
            "Ann, Ben, Cara and Dan each own a different pet: a cat, a dog, a fish "
            "and a parrot. " + " ".join(clues) + " Who owns the " + pet
            + "? Answer with the name inside \\boxed{}."
        )
        return obs, {"clues": clues}

    def step(self, action):
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        m = re.search(r"\\boxed\{(.+?)\}", action)
        if not m:
            return "Answer inside \\boxed{}.", -0.1, False, truncated, {}
        if m.group(1).strip().lower() == self.answer.lower():
            return "Correct!", 1.0, True, False, {}
        return "Wrong. It was " + self.answer + ".", 0.0, True, False, {}

    def solution(self):
        return self.answer
