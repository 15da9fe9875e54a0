"""A counting game split over modules."""
GAME_NAME = "counting"
