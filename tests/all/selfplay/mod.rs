//! Self-play's tests (`spade_selfplay`, `spade train`, `spade eval`, `spade report`): the loop
//! driven by scripted policies and tiny models, credit assignment and the delay buffer from
//! hand-computed examples, learning, fixed-environment training, sampling on an inference
//! server, the shipped configs, and reports.
mod adapter_sync;
mod admission;
mod configs;
mod credit;
mod delay;
mod designs;
mod fixed_envs;
mod inference;
mod learning;
mod report;
mod sft;
mod train;
