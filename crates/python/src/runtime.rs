//! `spade._native.Runtime`: the per-process engine, guest and caches.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use spade_envtools::check::{CheckOptions, check};
use spade_envtools::trajectory::RecordMeta;
use spade_envtools::{Episode, Record};
use spade_sandbox::{Config, Pool, SandboxOptions};

use crate::blocking;
use crate::env::{Env, Open};
use crate::errors;
use crate::limits;

/// The engine, the pre-initialised guest and the caches: build one per process and load every
/// environment through it.
#[pyclass(module = "spade._native", frozen)]
pub struct Runtime {
    inner: spade_sandbox::Runtime,
}

#[pymethods]
impl Runtime {
    /// `limits`: a mapping of `spade.Limits` fields; `cache_dir`: where compiled artifacts and
    /// snapshots are kept (default `$SPADE_CACHE_DIR` or `~/.cache/spade`); `pool_slots`:
    /// sandboxes alive at once; `notice`: called with one line before the first use on a
    /// machine compiles the guest (about a minute), and never when the cache is warm.
    #[new]
    #[pyo3(signature = (limits=None, cache_dir=None, pool_slots=None, snapshots=true, notice=None))]
    fn new(
        py: Python<'_>,
        limits: Option<&Bound<'_, PyDict>>,
        cache_dir: Option<PathBuf>,
        pool_slots: Option<u32>,
        snapshots: bool,
        notice: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let mut config = Config {
            limits: limits::from_mapping(limits)?,
            snapshots,
            ..Config::default()
        };
        if let Some(dir) = cache_dir {
            config.cache_dir = Some(dir);
        }
        if let Some(sandboxes) = pool_slots {
            config.pool = Some(Pool {
                sandboxes,
                ..Pool::default()
            });
        }
        let line = format!(
            "spade: compiling the sandbox's guest for this machine (about a minute, once; cached in {})",
            config
                .cache_dir
                .as_deref()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| "no cache directory: every process compiles it".to_owned())
        );
        let announce = move || {
            if let Some(notice) = notice {
                Python::attach(|py| {
                    if let Err(err) = notice.call1(py, (line,)) {
                        err.print(py);
                    }
                });
            }
        };
        let inner = py
            .detach(|| spade_sandbox::Runtime::new_announcing(config, announce))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(Runtime { inner })
    }

    /// Loads `source` into a new sandbox: `seed` seeds its randomness, `max_turns` is passed to
    /// the constructor when given, and `record` is a path the episode's trajectory is written
    /// to (what `spade replay` reads). A load error raises; with `record`, it is recorded first.
    #[pyo3(signature = (source, *, seed=0, max_turns=None, record=None, hint=None))]
    fn load(
        &self,
        py: Python<'_>,
        source: String,
        seed: u64,
        max_turns: Option<u32>,
        record: Option<PathBuf>,
        hint: Option<String>,
    ) -> PyResult<Env> {
        let options = SandboxOptions { seed, max_turns };
        let runtime = &self.inner;
        let (record, path) = match record {
            None => (Record::Off, None),
            Some(path) => {
                let file = File::create(&path).map_err(|e| {
                    PyOSError::new_err(format!("creating the recording {}: {e}", path.display()))
                })?;
                let meta = RecordMeta {
                    hint,
                    ..RecordMeta::default()
                };
                (Record::to(BufWriter::new(file), meta), Some(path))
            }
        };
        let shown = path.as_deref().map(|p| p.display().to_string());
        let shown = shown.unwrap_or_default();
        let episode = blocking::run(py, Episode::start(runtime, &source, options, record))
            .map_err(|e| PyOSError::new_err(format!("writing the recording {shown}: {e}")))?;
        if let Err(err) = episode.info() {
            let err = errors::call_error(py, err);
            episode
                .finish()
                .map_err(|e| PyOSError::new_err(format!("finishing the recording {shown}: {e}")))?;
            return Err(err);
        }
        let instance = Open::new(episode, path);
        Ok(Env::new(instance))
    }

    /// Runs `spade check` on `source`; returns the report as JSON and each finding's
    /// trajectory (JSON Lines) or `None`, in the order of the report's findings.
    #[pyo3(signature = (source, *, seeds=5, max_steps=30, fuel_budget=None))]
    fn check(
        &self,
        py: Python<'_>,
        source: String,
        seeds: u32,
        max_steps: u32,
        fuel_budget: Option<u64>,
    ) -> PyResult<(String, Vec<Option<String>>)> {
        let options = CheckOptions {
            seeds,
            max_steps,
            fuel_budget,
            ..CheckOptions::default()
        };
        let report = blocking::run(py, check(&self.inner, &source, &options));
        let trajectories = report
            .findings
            .iter()
            .map(|f| f.trajectory.clone())
            .collect();
        let json = serde_json::to_string(&report)
            .map_err(|e| PyRuntimeError::new_err(format!("encoding the check report: {e}")))?;
        Ok((json, trajectories))
    }

    /// The limits every sandbox of this runtime gets, as a mapping like `limits=`.
    fn limits<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        limits::to_mapping(py, self.inner.limits())
    }

    /// The directory of the compiled-artifact and snapshot cache, if any.
    #[getter]
    fn cache_dir(&self) -> Option<PathBuf> {
        self.inner.config().cache_dir.clone()
    }
}
