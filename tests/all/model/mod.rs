//! Model-layer tests on tiny random-initialised models (no download).
mod checkpoint;
mod common;
mod decoder;
mod gguf;
mod grpo;
mod quant;
mod reference;
mod sampling;
