TARGET_MIN = 3
TARGET_MAX = 9


def parse(action):
    """The integer in `\\boxed{...}`, or None."""
    start = action.rfind("\\boxed{")
    end = action.find("}", start)
    if start < 0 or end < 0:
        return None
    try:
        return int(action[start + len("\\boxed{"):end])
    except ValueError:
        return None
