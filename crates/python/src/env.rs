//! `spade._native.Env`: one sandboxed environment instance, optionally recorded.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use spade_envtools::trajectory::{RecordError, Recorder};
use spade_sandbox::{EnvInfo, Sandbox};

use crate::blocking;
use crate::errors;

/// How an instance is driven.
pub enum Instance {
    /// Straight through its sandbox.
    Plain(Box<Sandbox>),
    /// Through a recorder that writes every call to `path`.
    Recorded {
        recorder: Box<Recorder<BufWriter<File>>>,
        path: PathBuf,
    },
    /// Closed: the sandbox is freed and a recording is finished.
    Closed,
}

/// Why a recorded call failed: the sandbox's error, or the trajectory's file.
fn record_error(py: Python<'_>, path: &std::path::Path, err: RecordError) -> PyErr {
    match err {
        RecordError::Call(err) => errors::call_error(py, &err),
        RecordError::Io(err) => {
            PyOSError::new_err(format!("writing the recording {}: {err}", path.display()))
        }
    }
}

/// One environment instance in its own sandbox. Calls release the GIL while the guest runs;
/// two threads calling one instance take turns.
#[pyclass(module = "spade._native", frozen)]
pub struct Env {
    instance: Mutex<Instance>,
    info: EnvInfo,
}

impl Env {
    pub fn new(instance: Instance) -> Env {
        let info = match &instance {
            Instance::Plain(sandbox) => sandbox.info().clone(),
            Instance::Recorded { recorder, .. } => recorder
                .info()
                .expect("a recorded instance is built only after a successful load")
                .clone(),
            Instance::Closed => unreachable!("an instance starts open"),
        };
        Env {
            instance: Mutex::new(instance),
            info,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Instance> {
        // A panic while a call held the lock leaves the instance as the call left it; the
        // sandbox itself refuses calls after an interrupted one (`Dead(Cancelled)`).
        self.instance.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sandbox_of(instance: &Instance) -> Option<&Sandbox> {
        match instance {
            Instance::Plain(sandbox) => Some(sandbox.as_ref()),
            Instance::Recorded { recorder, .. } => recorder.sandbox(),
            Instance::Closed => None,
        }
    }

    fn closed(py: Python<'_>, call: &str) -> PyErr {
        errors::usage(py, format!("{call}() on a closed environment"))
    }
}

/// `(observation, reward, terminated, truncated, info_json)`.
type StepTuple = (String, f64, bool, bool, String);

#[pymethods]
impl Env {
    /// `reset(seed=seed, **fields)` where `fields_json` (a JSON object, or `None`) holds the
    /// keyword fields; returns `(observation, info_json, dropped)`, `dropped` being the fields
    /// the environment's `reset` does not take.
    #[pyo3(signature = (seed=None, fields_json=None))]
    fn reset(
        &self,
        py: Python<'_>,
        seed: Option<u64>,
        fields_json: Option<String>,
    ) -> PyResult<(String, String, Vec<String>)> {
        let fields = match fields_json {
            None => None,
            Some(text) => match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(serde_json::Value::Object(map)) => Some(map),
                _ => {
                    return Err(errors::usage(
                        py,
                        "reset fields must be a JSON object".into(),
                    ));
                }
            },
        };
        let mut guard = self.lock();
        match &mut *guard {
            Instance::Plain(sandbox) => {
                let (reset, dropped) = blocking::run(py, async {
                    match &fields {
                        Some(fields) => sandbox.reset_with(seed, fields).await,
                        None => sandbox.reset(seed).await.map(|r| (r, Vec::new())),
                    }
                })
                .map_err(|e| errors::call_error(py, &e))?;
                Ok((reset.observation, reset.info, dropped))
            }
            Instance::Recorded { recorder, path } => {
                let (reset, dropped) = blocking::run(py, async {
                    match &fields {
                        Some(fields) => recorder.reset_with(seed, fields).await,
                        None => recorder.reset(seed).await.map(|r| (r, Vec::new())),
                    }
                })
                .map_err(|e| record_error(py, path, e))?;
                Ok((reset.observation, reset.info, dropped))
            }
            Instance::Closed => Err(Env::closed(py, "reset")),
        }
    }

    /// `step(action)`.
    fn step(&self, py: Python<'_>, action: String) -> PyResult<StepTuple> {
        let mut guard = self.lock();
        let step =
            match &mut *guard {
                Instance::Plain(sandbox) => blocking::run(py, sandbox.step(&action))
                    .map_err(|e| errors::call_error(py, &e))?,
                Instance::Recorded { recorder, path } => blocking::run(py, recorder.step(&action))
                    .map_err(|e| record_error(py, path, e))?,
                Instance::Closed => return Err(Env::closed(py, "step")),
            };
        Ok((
            step.observation,
            step.reward,
            step.terminated,
            step.truncated,
            step.info,
        ))
    }

    /// `solution()`.
    fn solution(&self, py: Python<'_>) -> PyResult<String> {
        let mut guard = self.lock();
        match &mut *guard {
            Instance::Plain(sandbox) => {
                blocking::run(py, sandbox.solution()).map_err(|e| errors::call_error(py, &e))
            }
            Instance::Recorded { recorder, path } => {
                blocking::run(py, recorder.solution()).map_err(|e| record_error(py, path, e))
            }
            Instance::Closed => Err(Env::closed(py, "solution")),
        }
    }

    /// Calls the environment's `close()` (when the sandbox is alive), frees the sandbox and
    /// finishes a recording. Closing twice does nothing. An error of the environment's
    /// `close()` is raised after the sandbox is freed and the recording finished.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut guard = self.lock();
        let instance = std::mem::replace(&mut *guard, Instance::Closed);
        match instance {
            Instance::Closed => Ok(()),
            Instance::Plain(mut sandbox) => {
                if sandbox.dead().is_some() {
                    return Ok(());
                }
                blocking::run(py, sandbox.close()).map_err(|e| errors::call_error(py, &e))
            }
            Instance::Recorded { mut recorder, path } => {
                let alive = recorder.sandbox().is_some_and(|s| s.dead().is_none());
                let closed = if alive {
                    blocking::run(py, recorder.close()).map_err(|e| record_error(py, &path, e))
                } else {
                    Ok(())
                };
                py.detach(|| recorder.finish()).map_err(|e| {
                    PyOSError::new_err(format!("finishing the recording {}: {e}", path.display()))
                })?;
                closed
            }
        }
    }

    /// The environment class's name.
    #[getter]
    fn class_name(&self) -> &str {
        &self.info.class_name
    }

    /// The environment's `max_turns` after construction, if it is an int.
    #[getter]
    fn max_turns(&self) -> Option<u32> {
        self.info.max_turns
    }

    /// Tool schemas (JSON text, OpenAI function format) of a tool-use environment.
    #[getter]
    fn tools_json(&self) -> Option<&str> {
        self.info.tools.as_deref()
    }

    /// Fuel the last call used.
    #[getter]
    fn last_fuel(&self) -> u64 {
        let guard = self.lock();
        Env::sandbox_of(&guard).map_or(0, Sandbox::last_fuel)
    }

    /// What the environment printed during the last call: `(stdout, stderr, dropped_bytes)`.
    #[getter]
    fn last_output(&self) -> (String, String, u64) {
        let guard = self.lock();
        let output = Env::sandbox_of(&guard)
            .map(|s| s.last_output().clone())
            .unwrap_or_default();
        (output.stdout, output.stderr, output.dropped_bytes)
    }

    /// Why the sandbox is dead (an error kind such as `"out_of_fuel"`), or `None`; `"closed"`
    /// after `close()`.
    #[getter]
    fn dead(&self) -> Option<&'static str> {
        let guard = self.lock();
        match &*guard {
            Instance::Closed => Some("closed"),
            instance => Env::sandbox_of(instance)
                .and_then(Sandbox::dead)
                .map(|k| k.as_str()),
        }
    }
}

impl Drop for Env {
    /// An instance dropped without `close()` still finishes its recording: nothing recorded is
    /// lost. (The environment's own `close()` is not called; a dropped sandbox is freed.)
    fn drop(&mut self) {
        let instance = std::mem::replace(&mut *self.lock(), Instance::Closed);
        if let Instance::Recorded { recorder, path } = instance
            && let Err(err) = recorder.finish()
        {
            eprintln!("spade: finishing the recording {}: {err}", path.display());
        }
    }
}
