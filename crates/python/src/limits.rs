//! The `limits=` mapping of `spade.Runtime` as the sandbox's [`Limits`].
//!
//! Keys are the field names of [`Limits`]; sizes are bytes, fuel is WebAssembly fuel, and
//! `call_deadline` is seconds (a float). A key the sandbox does not know, a negative or
//! non-numeric value, is a `ValueError` naming it: a typo must not silently leave a default.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use spade_sandbox::Limits;

/// A limit's field in [`Limits`].
type Field<T> = fn(&mut Limits) -> &mut T;

/// The integer-valued limits, with their accessors.
const INTEGER_LIMITS: &[(&str, Field<u64>)] = &[
    ("fuel_per_call", |l| &mut l.fuel_per_call),
    ("load_fuel", |l| &mut l.load_fuel),
];

/// The byte-sized limits, with their accessors.
const SIZE_LIMITS: &[(&str, Field<usize>)] = &[
    ("memory_limit", |l| &mut l.memory_limit),
    ("output_limit", |l| &mut l.output_limit),
    ("observation_limit", |l| &mut l.observation_limit),
    ("info_limit", |l| &mut l.info_limit),
    ("solution_limit", |l| &mut l.solution_limit),
    ("tools_limit", |l| &mut l.tools_limit),
    ("error_limit", |l| &mut l.error_limit),
];

/// The defaults, as the mapping `spade.Limits` is built from.
pub fn defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    to_mapping(py, &Limits::default())
}

/// `limits` as a mapping with the keys [`from_mapping`] reads.
pub fn to_mapping<'py>(py: Python<'py>, limits: &Limits) -> PyResult<Bound<'py, PyDict>> {
    let mut limits = limits.clone();
    let dict = PyDict::new(py);
    for (name, field) in INTEGER_LIMITS {
        dict.set_item(name, *field(&mut limits))?;
    }
    for (name, field) in SIZE_LIMITS {
        dict.set_item(name, *field(&mut limits))?;
    }
    dict.set_item("call_deadline", limits.call_deadline.as_secs_f64())?;
    Ok(dict)
}

/// The defaults with the given keys replaced.
pub fn from_mapping(mapping: Option<&Bound<'_, PyDict>>) -> PyResult<Limits> {
    let mut limits = Limits::default();
    let Some(mapping) = mapping else {
        return Ok(limits);
    };
    for (key, value) in mapping.iter() {
        let name: String = key
            .extract()
            .map_err(|_| PyValueError::new_err("limits: every key must be a string"))?;
        if let Some((_, field)) = INTEGER_LIMITS.iter().find(|(n, _)| *n == name) {
            *field(&mut limits) = non_negative(&name, &value)?;
        } else if let Some((_, field)) = SIZE_LIMITS.iter().find(|(n, _)| *n == name) {
            *field(&mut limits) = usize::try_from(non_negative(&name, &value)?)
                .map_err(|_| PyValueError::new_err(format!("limits: {name} is too large")))?;
        } else if name == "call_deadline" {
            let seconds: f64 = value.extract().map_err(|_| {
                PyValueError::new_err("limits: call_deadline must be a number of seconds")
            })?;
            limits.call_deadline = Duration::try_from_secs_f64(seconds)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "limits: call_deadline must be a positive number of seconds, not {seconds}"
                    ))
                })?;
        } else {
            let known: Vec<&str> = INTEGER_LIMITS
                .iter()
                .map(|(n, _)| *n)
                .chain(SIZE_LIMITS.iter().map(|(n, _)| *n))
                .chain(["call_deadline"])
                .collect();
            return Err(PyValueError::new_err(format!(
                "limits: unknown limit '{name}' (known: {})",
                known.join(", ")
            )));
        }
    }
    Ok(limits)
}

fn non_negative(name: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if value.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyValueError::new_err(format!(
            "limits: {name} must be an integer, not a bool"
        )));
    }
    value.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "limits: {name} must be a non-negative integer, not {}",
            value
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "?".to_owned())
        ))
    })
}
