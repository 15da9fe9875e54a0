//! The one place that runs wasmtime's `bindgen!` over `wit/spade-env.wit`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "sandbox",
    exports: { default: async },
});

pub use exports::spade::env::environment::{EnvError, LoadOptions, SizeLimits};
