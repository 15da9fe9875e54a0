//! Arbitrary bytes as an environment's Python source, in the sandbox.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use spade_envtools::fuzz::targets::Harness;

static HARNESS: OnceLock<Harness> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    HARNESS.get_or_init(Harness::new).python_source(data);
});
