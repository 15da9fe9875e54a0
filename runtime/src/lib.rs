//! spade-runtime (placeholder until the sandbox core lands).
