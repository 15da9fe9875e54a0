//! `spade._native`: spade's sandbox as a CPython extension module.
//!
//! The Python package `spade` (in `../python/spade/`) wraps these classes with the types the
//! SPADE reference's code expects (info dicts, exceptions, context managers, async variants);
//! this module is the thin layer that moves values across and releases the GIL while a guest
//! runs.
//!
//! - [`runtime`]: `Runtime` (engine, guest and caches: one per process);
//! - [`env`]: `Env` (one sandboxed environment instance, optionally recorded);
//! - [`errors`]: sandbox outcomes as the exceptions of `spade.errors`;
//! - [`blocking`]: the one place that runs an async sandbox call from a Python thread;
//! - [`limits`]: the `limits=` mapping as the sandbox's `Limits`.

mod blocking;
mod env;
mod errors;
mod limits;
mod runtime;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<runtime::Runtime>()?;
    m.add_class::<env::Env>()?;
    m.add_function(wrap_pyfunction!(env_source, m)?)?;
    m.add_function(wrap_pyfunction!(rlve_names, m)?)?;
    m.add("GUEST_SHA256", spade_sandbox::GUEST_SHA256)?;
    m.add("VERSION", env!("CARGO_PKG_VERSION"))?;
    m.add("DEFAULT_LIMITS", limits::defaults(m.py())?)?;
    Ok(())
}

/// The source of an environment named as `spade run` names it: `rlve:NAME`, or `module:Class`
/// with `package` (a directory). A plain file is read by the caller.
#[pyfunction]
#[pyo3(signature = (spec, package=None))]
fn env_source(py: Python<'_>, spec: &str, package: Option<std::path::PathBuf>) -> PyResult<String> {
    use spade_envtools::package::EnvSpec;
    py.detach(|| {
        let parsed = EnvSpec::parse(spec, package.as_deref()).map_err(|e| e.to_string())?;
        if let EnvSpec::File(path) = &parsed {
            return Err(format!(
                "'{}' names a file: read it and pass its text to Runtime.load",
                path.display()
            ));
        }
        parsed
            .resolve()
            .map(|resolved| resolved.source)
            .map_err(|e| format!("loading environment '{spec}': {e}"))
    })
    .map_err(pyo3::exceptions::PyValueError::new_err)
}

/// The names of RLVE's environments that have a parameter controller (what `rlve:NAME` takes),
/// from the installed `rlve-gym` (or `$SPADE_RLVE_DIR`).
#[pyfunction]
fn rlve_names() -> PyResult<Vec<String>> {
    use spade_envtools::package::rlve;
    rlve::locate()
        .and_then(|root| rlve::names(&root))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}
