//! Model-layer tests on tiny random-initialised models (no download).
mod checkpoint;
mod common;
mod decoder;
mod gguf;
mod grpo;
mod reference;
mod sampling;
