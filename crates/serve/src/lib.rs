//! spade-serve: the sandbox as an OpenEnv-compatible service (`spade serve`).
//!
//! It speaks the wire protocol of the `openenv` package (version 0.10.0): a WebSocket session
//! endpoint (`/ws`: reset, step, state and close messages; OpenEnv's error codes) and the HTTP
//! endpoints `/health`, `/metadata`, `/schema`, `/state`, `/reset` and `/step`, so stock OpenEnv
//! clients work unchanged. One session owns one sandbox per episode. Environments are
//! registered by source and checked with `spade check` first (`/envs`); episodes can be
//! recorded as trajectory files that `spade replay` reproduces (`/trajectories/{id}`).
//! Tool-use environments also speak OpenEnv's MCP mode ([`mcp`]: `POST /mcp`, `mcp` messages,
//! sessions held between requests and attached with `/ws?session_id=`).
//! See [`protocol`] for the message formats.

pub mod admission;
pub mod deadlines;
mod fair;
mod fork;
mod held;
pub mod http;
pub mod mcp;
pub mod openapi;
pub mod protocol;
pub mod recordings;
mod registry;
mod server;
mod session;
pub mod tools;
mod ws;

pub use registry::{
    Origin, Readiness, Registration, Registry, RegistryError, RegistryLimits, Tenant,
};
pub use server::{AppState, BindError, ServeConfig, Server, default_max_connections};
pub use session::{Outcome, Session, SessionContext, SessionError};
