//! Forking a session: a spade extension to OpenEnv's protocol. A WebSocket message
//! `{"type": "fork", "data": {"n": N, "reseed": ...}}` or `POST /sessions/{id}/fork` (a held
//! session, with the same body) copies the session's running episode into `n` new sessions,
//! which the server holds (as `openenv/session/create` does) for a WebSocket to attach to
//! (`/ws?session_id=`). Each copy takes a session slot like any session, all or none (a fork
//! that does not fit is `CAPACITY_REACHED` and creates nothing), and belongs to the tenant
//! that forked.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::admission::{AtCapacity, SessionSlot};
use crate::held::SharedSession;
use crate::protocol::{FieldError, type_name};
use crate::registry::Tenant;
use crate::server::AppState;
use crate::session::SessionError;

/// The most copies one fork makes (the session slots bound them too).
pub const MAX_FORK_COPIES: u64 = 1024;

/// A fork's request: how many copies and how each is reseeded.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkRequest {
    /// One entry per copy: `None` copies the entropy exactly, a seed reseeds it.
    pub reseeds: Vec<Option<u64>>,
}

impl ForkRequest {
    /// Parses `{"n"?: int, "reseed"?: null | int | [null | int, ...]}` (`n` defaults to 1, or
    /// to the length of a `reseed` list).
    pub fn parse(data: &Map<String, Value>) -> Result<ForkRequest, FieldError> {
        if let Some(extra) = data.keys().find(|k| !matches!(k.as_str(), "n" | "reseed")) {
            return Err(FieldError::at(
                &[extra],
                format!("unknown fork field '{extra}' (a fork takes n and reseed)"),
            ));
        }
        let n = match data.get("n") {
            None | Some(Value::Null) => None,
            Some(value) => match value.as_u64() {
                Some(n) if (1..=MAX_FORK_COPIES).contains(&n) => Some(n as usize),
                _ => {
                    return Err(FieldError::at(
                        &["n"],
                        format!(
                            "n must be an integer from 1 to {MAX_FORK_COPIES}, not {}",
                            shown(value)
                        ),
                    ));
                }
            },
        };
        let seed = |value: &Value, loc: &[&str]| match value {
            Value::Null => Ok(None),
            other => other.as_u64().map(Some).ok_or_else(|| {
                FieldError::at(
                    loc,
                    format!(
                        "a reseed must be null or an integer from 0 to 2^64-1, not {}",
                        shown(other)
                    ),
                )
            }),
        };
        let reseeds = match data.get("reseed") {
            Some(Value::Array(list)) => {
                if n.is_some_and(|n| n != list.len()) || list.is_empty() {
                    return Err(FieldError::at(
                        &["reseed"],
                        format!(
                            "a reseed list needs one entry per copy ({}), not {}",
                            n.unwrap_or(1),
                            list.len()
                        ),
                    ));
                }
                if list.len() as u64 > MAX_FORK_COPIES {
                    return Err(FieldError::at(
                        &["reseed"],
                        format!("at most {MAX_FORK_COPIES} copies per fork"),
                    ));
                }
                list.iter()
                    .enumerate()
                    .map(|(i, v)| seed(v, &["reseed", &i.to_string()]))
                    .collect::<Result<_, _>>()?
            }
            None => vec![None; n.unwrap_or(1)],
            Some(value) => {
                let one = seed(value, &["reseed"])?;
                if n.is_some_and(|n| n > 1) && one.is_some() {
                    return Err(FieldError::at(
                        &["reseed"],
                        "with n above 1, reseed is a list (one seed per copy): one seed for all would make them the same",
                    ));
                }
                vec![one; n.unwrap_or(1)]
            }
        };
        Ok(ForkRequest { reseeds })
    }
}

fn shown(value: &Value) -> String {
    match value {
        Value::Number(n) => n.to_string(),
        other => type_name(other).to_owned(),
    }
}

/// Why a fork created nothing.
#[derive(Debug)]
pub enum ForkFailure {
    /// Not enough free session slots for every copy.
    Capacity(AtCapacity),
    /// The session could not be forked (no running episode, a dead sandbox, a state holding
    /// a host resource).
    Session(SessionError),
}

/// A new session a fork made.
#[derive(Debug, Clone)]
pub struct Forked {
    pub session_id: String,
    pub episode_id: String,
}

impl Forked {
    /// The JSON list of a fork's answer.
    pub fn to_json(copies: &[Forked]) -> Value {
        Value::Array(
            copies
                .iter()
                .map(|c| json!({"session_id": c.session_id, "episode_id": c.episode_id}))
                .collect(),
        )
    }
}

/// Forks `parent`'s running episode into new held sessions of `tenant`, one per entry of
/// `request`.
pub async fn fork(
    state: &Arc<AppState>,
    parent: &SharedSession,
    tenant: Tenant,
    request: &ForkRequest,
) -> Result<Vec<Forked>, ForkFailure> {
    let mut slots: Vec<SessionSlot> = Vec::with_capacity(request.reseeds.len());
    for _ in &request.reseeds {
        match state.admission.admit_session(tenant) {
            Ok(slot) => slots.push(slot),
            Err(mut full) => {
                // The slots this fork took do not count as active.
                full.active -= slots.len();
                return Err(ForkFailure::Capacity(full));
            }
        }
    }
    let copies: Vec<(String, Option<u64>)> = request
        .reseeds
        .iter()
        .map(|&reseed| (state.new_session_id(), reseed))
        .collect();
    let sessions = parent
        .lock()
        .await
        .fork(&copies)
        .await
        .map_err(ForkFailure::Session)?;
    let mut made = Vec::with_capacity(sessions.len());
    for (session, slot) in sessions.into_iter().zip(slots) {
        let forked = Forked {
            session_id: session.id().to_owned(),
            episode_id: session.episode_id().unwrap_or_default().to_owned(),
        };
        state.held.insert(SharedSession::new(session, slot, tenant));
        made.push(forked);
    }
    Ok(made)
}
