//! `spade._native.Env`: one sandboxed environment instance, optionally recorded: an
//! [`Episode`] behind a lock, with Python's exceptions for its errors.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use spade_envtools::trajectory::{RecordMeta, parent_name};
use spade_envtools::{Branch, Cost, Costed, Episode, EpisodeError, Record};
use spade_sandbox::EnvInfo;

use crate::blocking;
use crate::errors;

/// An open instance: its episode, where it is recorded, and what its last call cost.
pub struct Open {
    episode: Episode,
    /// The trajectory file, when recorded.
    path: Option<PathBuf>,
    /// What the last call cost (the load's, before the first call).
    last: Cost,
}

impl Open {
    /// An instance of `episode` (loaded), recorded to `path` if given.
    pub fn new(episode: Episode, path: Option<PathBuf>) -> Open {
        let last = episode.load_cost().clone();
        Open {
            episode,
            path,
            last,
        }
    }

    /// The value of a call, keeping its cost as the last; its error as Python's exception.
    fn take<T>(&mut self, py: Python<'_>, costed: Costed<T>) -> PyResult<T> {
        self.last = costed.cost;
        costed
            .result
            .map_err(|err| episode_error(py, self.path.as_deref(), err))
    }
}

/// Why a call failed: the sandbox's error, or the trajectory's file.
fn episode_error(py: Python<'_>, path: Option<&std::path::Path>, err: EpisodeError) -> PyErr {
    match err {
        EpisodeError::Call(err) => errors::call_error(py, &err),
        EpisodeError::Record(err) => {
            let path = path.map(|p| p.display().to_string()).unwrap_or_default();
            PyOSError::new_err(format!("writing the recording {path}: {err}"))
        }
        other @ (EpisodeError::NoDifficulty
        | EpisodeError::Fork(_)
        | EpisodeError::UnrecordedParent
        | EpisodeError::FuelLimit { .. }) => errors::usage(py, other.to_string()),
    }
}

/// Finishes an instance's recording, if it has one; the error says which file failed.
fn finish(open: Open) -> Result<(), String> {
    let Open { episode, path, .. } = open;
    episode.finish().map(drop).map_err(|e| {
        let path = path.map(|p| p.display().to_string()).unwrap_or_default();
        format!("finishing the recording {path}: {e}")
    })
}

/// One environment instance in its own sandbox. Calls release the GIL while the guest runs;
/// two threads calling one instance take turns.
#[pyclass(module = "spade._native", frozen)]
pub struct Env {
    /// `None` once closed: the sandbox is freed and a recording is finished.
    instance: Mutex<Option<Open>>,
    info: EnvInfo,
}

impl Env {
    pub fn new(open: Open) -> Env {
        let info = open
            .episode
            .info()
            .expect("an instance is built only after a successful load")
            .clone();
        Env {
            instance: Mutex::new(Some(open)),
            info,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Open>> {
        // A panic while a call held the lock leaves the instance as the call left it; the
        // sandbox itself refuses calls after an interrupted one (`Dead(Cancelled)`).
        self.instance.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open instance, or the error of a call on a closed one.
    fn open<'a>(
        py: Python<'_>,
        guard: &'a mut MutexGuard<'_, Option<Open>>,
        call: &str,
    ) -> PyResult<&'a mut Open> {
        guard
            .as_mut()
            .ok_or_else(|| errors::usage(py, format!("{call}() on a closed environment")))
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
            // Kept as text, so integers of any size reach `reset` as Python ints.
            Some(text) => match spade_sandbox::ExtraFields::parse(&text) {
                Ok(fields) => Some(fields),
                Err(err) => {
                    return Err(errors::usage(
                        py,
                        format!("reset fields must be a JSON object: {err}"),
                    ));
                }
            },
        };
        let mut guard = self.lock();
        let open = Env::open(py, &mut guard, "reset")?;
        let costed = blocking::run(py, async {
            match &fields {
                Some(fields) => open.episode.reset_with(seed, fields).await,
                None => open.episode.reset(seed).await.map(|r| (r, Vec::new())),
            }
        });
        let (reset, dropped) = open.take(py, costed)?;
        Ok((reset.observation, reset.info, dropped))
    }

    /// `step(action)`.
    fn step(&self, py: Python<'_>, action: String) -> PyResult<StepTuple> {
        let mut guard = self.lock();
        let open = Env::open(py, &mut guard, "step")?;
        let costed = blocking::run(py, open.episode.step(&action));
        let step = open.take(py, costed)?;
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
        let open = Env::open(py, &mut guard, "solution")?;
        let costed = blocking::run(py, open.episode.solution());
        open.take(py, costed)
    }

    /// Copies of this instance in exactly its state, one per entry of `reseeds` (`None`: an
    /// exact copy; a seed: WASI entropy and the module-global `random` seeded anew) and of
    /// `records` (`None`: not recorded; a path: the fork's trajectory, which names this
    /// instance's recording as its parent). The GIL is released while the copies are made.
    #[pyo3(signature = (reseeds, records, hint=None))]
    fn fork(
        &self,
        py: Python<'_>,
        reseeds: Vec<Option<u64>>,
        records: Vec<Option<PathBuf>>,
        hint: Option<String>,
    ) -> PyResult<Vec<Env>> {
        if reseeds.len() != records.len() {
            return Err(errors::usage(
                py,
                "fork: one reseed and one record per copy".into(),
            ));
        }
        let mut guard = self.lock();
        let open = Env::open(py, &mut guard, "fork")?;
        let mut branches = Vec::with_capacity(reseeds.len());
        for (reseed, record) in reseeds.into_iter().zip(&records) {
            let recording = match record {
                None => Record::Off,
                Some(path) => {
                    let file = File::create(path).map_err(|e| {
                        PyOSError::new_err(format!(
                            "creating the recording {}: {e}",
                            path.display()
                        ))
                    })?;
                    let meta = RecordMeta {
                        hint: hint.clone(),
                        ..RecordMeta::default()
                    };
                    Record::to(BufWriter::new(file), meta)
                }
            };
            let parent = match (&open.path, record) {
                (Some(parent), Some(fork)) => parent_name(parent, fork),
                _ => String::new(),
            };
            branches.push(Branch {
                reseed,
                record: recording,
                parent,
            });
        }
        let costed = blocking::run(py, open.episode.fork_n(branches));
        let copies = costed
            .result
            .map_err(|err| episode_error(py, open.path.as_deref(), err))?;
        Ok(copies
            .into_iter()
            .zip(records)
            .map(|(episode, path)| Env::new(Open::new(episode, path)))
            .collect())
    }

    /// Calls the environment's `close()` (when the sandbox is alive), frees the sandbox and
    /// finishes a recording. Closing twice does nothing. An error of the environment's
    /// `close()` is raised after the sandbox is freed and the recording finished.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let Some(mut open) = self.lock().take() else {
            return Ok(());
        };
        let closed = match open.episode.dead() {
            Some(_) => Ok(()),
            None => {
                let costed = blocking::run(py, open.episode.close());
                open.take(py, costed)
            }
        };
        py.detach(|| finish(open)).map_err(PyOSError::new_err)?;
        closed
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
        self.lock().as_ref().map_or(0, |open| open.last.fuel)
    }

    /// What the environment printed during the last call: `(stdout, stderr, dropped_bytes)`.
    #[getter]
    fn last_output(&self) -> (String, String, u64) {
        let output = self
            .lock()
            .as_ref()
            .map(|open| open.last.output.clone())
            .unwrap_or_default();
        (output.stdout, output.stderr, output.dropped_bytes)
    }

    /// Why the sandbox is dead (an error kind such as `"out_of_fuel"`), or `None`; `"closed"`
    /// after `close()`.
    #[getter]
    fn dead(&self) -> Option<&'static str> {
        match &*self.lock() {
            None => Some("closed"),
            Some(open) => open.episode.dead().map(|k| k.as_str()),
        }
    }
}

impl Drop for Env {
    /// An instance dropped without `close()` still finishes its recording: nothing recorded is
    /// lost. (The environment's own `close()` is not called; a dropped sandbox is freed.)
    fn drop(&mut self) {
        if let Some(open) = self.lock().take()
            && let Err(err) = finish(open)
        {
            eprintln!("spade: {err}");
        }
    }
}
