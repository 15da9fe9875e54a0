def reward_for(won):
    return 1.0 if won else 0.0
