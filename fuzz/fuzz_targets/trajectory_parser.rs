//! Arbitrary text as a trajectory file: parse and tamper-check.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    spade_envtools::fuzz::targets::trajectory_parser(data);
});
