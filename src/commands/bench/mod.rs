//! The benchmarks: `spade bench` measures the sandbox against CPython ([`sandbox`]);
//! `spade bench-model` measures sampling and the RL update ([`model`]), optionally against
//! llama.cpp's server ([`llama`]).

#[cfg(feature = "train")]
mod agreement;
mod cpu;
#[cfg(feature = "train")]
mod llama;
#[cfg(feature = "train")]
pub mod model;
pub mod sandbox;
mod variant;
