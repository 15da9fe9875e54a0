//! The one place that runs wasmtime's `bindgen!` over `wit/spade-env.wit`.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "sandbox",
    exports: { default: async },
    // The snapshot host functions trap when called out of turn (only the host's own snapshot
    // and restore calls make the guest call them).
    imports: { default: trappable },
});

pub use exports::spade::env::environment::{
    EnvError, EnvInfo as GuestEnvInfo, LoadOptions, SizeLimits,
};
