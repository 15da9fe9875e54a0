class EscapeEnv(ToolUseBaseEnv):
    def __init__(self, max_turns=3):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        self._tools = {
            'lookup': {
                'description': 'y' * (8 * 1024 * 1024),
                'parameters': {'type': 'object', 'properties': {}},
            }
        }
        self._state = {}
        self._expected_answer = '1'
        return 'ready', {}

    def tool_lookup(self):
        return 'nothing'

    def solution(self):
        return '1'
