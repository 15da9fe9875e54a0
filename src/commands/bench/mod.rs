//! The benchmarks: `spade bench` measures the sandbox against CPython ([`sandbox`]);
//! `spade bench-model` measures sampling and the RL update ([`model`]), optionally against
//! llama.cpp's server ([`llama`]), or one default iteration in-process against an inference
//! server ([`iteration`]).

#[cfg(feature = "train")]
mod agreement;
pub(crate) mod cpu;
#[cfg(feature = "train")]
mod iteration;
#[cfg(feature = "train")]
mod llama;
#[cfg(feature = "train")]
pub mod model;
pub mod sandbox;
#[cfg(feature = "train")]
mod update;
#[cfg(feature = "train")]
mod variant;
