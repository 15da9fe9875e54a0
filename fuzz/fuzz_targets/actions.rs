//! Arbitrary action sequences against the fixture environments (the first byte picks one).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use spade_envtools::fuzz::targets::Harness;

static HARNESS: OnceLock<Harness> = OnceLock::new();

const FIXTURES: &[&str] = &[
    include_str!("../../tests/envs/arithmetic_puzzle/env.py"),
    include_str!("../../tests/envs/grid_walk/env.py"),
    include_str!("../../tests/envs/tool_inventory/env.py"),
    include_str!("../../tests/envs/fraction_answer/env.py"),
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let source = FIXTURES[usize::from(pick) % FIXTURES.len()];
    HARNESS.get_or_init(Harness::new).actions(source, rest);
});
