class EscapeEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        hits = []
        def walk(cls, seen):
            for sub in type.__subclasses__(cls):
                if sub in seen:
                    continue
                seen.add(sub)
                init = sub.__dict__.get('__init__')
                g = getattr(init, '__globals__', None)
                if g and 'os' in g and hasattr(g['os'], 'system'):
                    hits.append(g['os'])
                walk(sub, seen)
        walk(object, set())
        outcomes = []
        for os_mod in hits[:3]:
            try:
                outcomes.append(os_mod.system('touch /tmp/spade-escape-written'))
            except Exception as exc:
                outcomes.append(type(exc).__name__)
        result = f'{len(hits)} os handles: {outcomes}'
        return str(result)[:2000], 0.0, False, False, {}

    def solution(self):
        return 'none'
