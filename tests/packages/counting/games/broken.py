def explode():
    raise ValueError("broken inside the package")


class Broken:
    def reset(self, seed=None):
        explode()

    def step(self, action):
        return "", 0.0, True, False, {}
