//! `Episode::fork`: recorded forks and their replay.
