//! Integration tests (one binary, a mod per area).
