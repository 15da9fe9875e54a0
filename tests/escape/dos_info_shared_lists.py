class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        # 60 levels of one list shared twice: 61 objects whose JSON has 2^60 leaves.
        tree = []
        for _ in range(60):
            tree = [tree, tree]
        return 'ok', 0.0, False, False, {'tree': tree}

    def solution(self):
        return 'none'
