//! `GET /openapi.json`: the OpenAPI document of the server's HTTP routes, so that
//! `openenv validate URL` can read the API version (`openapi_version_available`) and the
//! endpoint set (`mode_endpoint_consistency`: `/reset`, `/step` and `/state` together, the
//! "simulation" mode). It lists the routes of `server::router`; the request and response
//! bodies are described in docs/serve.md, not here.

use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The routes, each with its methods and a one-line summary.
const ROUTES: &[(&str, &[&str], &str)] = &[
    (
        "/health",
        &["get"],
        "Readiness of the environments and session counts",
    ),
    ("/metadata", &["get"], "Name and description of the server"),
    (
        "/schema",
        &["get"],
        "JSON schemas of the action, observation and state",
    ),
    ("/state", &["get"], "State of the stateless HTTP session"),
    (
        "/reset",
        &["post"],
        "Starts an episode (stateless HTTP: one call)",
    ),
    (
        "/step",
        &["post"],
        "Plays one action (stateless HTTP: one call)",
    ),
    ("/mcp", &["post"], "MCP JSON-RPC: tools/list and tools/call"),
    ("/envs", &["get", "post"], "Lists or registers environments"),
    (
        "/envs/{id}",
        &["get", "delete"],
        "Reads or removes one environment",
    ),
    (
        "/trajectories/{id}",
        &["get"],
        "The recorded trajectory of an episode",
    ),
    ("/ws", &["get"], "WebSocket session (OpenEnv's protocol)"),
    ("/openapi.json", &["get"], "This document"),
];

/// The OpenAPI 3.1 document; `info.version` is the crate's version.
pub fn document() -> Value {
    let mut paths = serde_json::Map::new();
    for (path, methods, summary) in ROUTES {
        let mut item = serde_json::Map::new();
        for method in *methods {
            item.insert(
                (*method).to_owned(),
                json!({
                    "summary": summary,
                    "responses": {"200": {"description": "OK"}},
                }),
            );
        }
        paths.insert((*path).to_owned(), Value::Object(item));
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "spade serve",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "OpenEnv's HTTP and WebSocket protocol over spade's sandbox",
        },
        "paths": paths,
    })
}

/// `GET /openapi.json`.
pub async fn openapi() -> Response {
    axum::Json(document()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_has_a_version_and_the_simulation_endpoints() {
        let doc = document();
        assert!(doc["info"]["version"].is_string());
        for path in ["/reset", "/step", "/state", "/health", "/openapi.json"] {
            assert!(doc["paths"][path].is_object(), "{path} missing");
        }
    }
}
