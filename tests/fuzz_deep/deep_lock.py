class DeepLockEnv:
    """A combination lock whose bug lies deep: each action whose length is the dial's next
    digit (mod 4) opens one more pin, any other action closes them all; opening the eighth pin
    divides by zero. From a reset, eight right actions in a row come about once in 4^8 tries;
    from a state with k pins open, once in 4^(8 - k). The pin count is spelled as a word, so
    each depth is a new observation shape: snapshot fuzzing (`spade fuzz --fork`) keeps the
    state where a pin first opened and goes on from it."""

    WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight"]
    PINS = 8

    def __init__(self, max_turns=40):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.pins = 0
        self.turns = 0
        return "pins zero open", {}

    def step(self, action):
        self.turns += 1
        if len(action) % 4 == (self.pins * 3 + 1) % 4:
            self.pins += 1
        else:
            self.pins = 0
        if self.pins == self.PINS:
            return str(1 / (self.pins - self.PINS)), 0.0, False, False, {}
        return f"pins {self.WORDS[self.pins]} open", 0.0, False, self.turns >= self.max_turns, {}

    def solution(self):
        return "no solution: the lock is a fuzzing target"
