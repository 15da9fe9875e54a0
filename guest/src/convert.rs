//! Strict conversion of environment return values into WIT values.
//!
//! Conversion happens in Rust, walking Python objects directly: a step's info dict becomes
//! JSON text here rather than through Python's `json` module, which used to dominate a step.

use std::collections::BTreeMap;

use rustpython_vm::builtins::{PyDict, PyFloat, PyInt, PyList, PyStr, PyTuple};
use rustpython_vm::{AsObject, PyObject, PyObjectRef, VirtualMachine};

use crate::exports::spade::env::environment::{EnvError, EnvInfo, ResetResult, StepResult};
use crate::interpreter::exception_error;
use crate::limits::{self, Capped, Limit};

/// Deepest nesting accepted in an info dict.
const MAX_JSON_DEPTH: usize = 64;

/// The most decimal digits of an int in an info dict or tool schema: CPython's default
/// `sys.int_info.default_max_str_digits`, past which its `json.dumps` raises as well. An int is
/// measured by its bits before it is converted, so a huge one costs nothing to refuse.
const MAX_INT_DIGITS: u64 = 4300;

fn describe(vm: &VirtualMachine, prelude: &PyObjectRef, value: &PyObject) -> String {
    vm.call_method(prelude, "describe", (value.to_owned(),))
        .ok()
        .and_then(|s| {
            s.downcast_ref::<PyStr>()
                .map(|s| s.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| value.class().name().to_string())
}

fn contract(message: String) -> EnvError {
    EnvError::Contract(message)
}

fn is_bool(vm: &VirtualMachine, value: &PyObject) -> bool {
    value.class().is(vm.ctx.types.bool_type)
}

/// A Python `str` as Rust text, checked against `limit` before it is copied; lone surrogates
/// (not valid UTF-8) are a contract error.
fn utf8(value: &PyStr, name: &str, limit: Limit) -> Result<String, EnvError> {
    let size = value.byte_len();
    if !limit.allows(size) {
        return Err(contract(format!(
            "{name} is {size} bytes, {}",
            limit.over()
        )));
    }
    value.to_str().map(str::to_owned).ok_or_else(|| {
        contract(format!(
            "{name} contains a lone surrogate and is not valid UTF-8"
        ))
    })
}

/// `value` must be a `str` of at most `limit` bytes; `what` is the message for another type,
/// `name` names the value.
pub fn text(
    vm: &VirtualMachine,
    prelude: &PyObjectRef,
    value: &PyObject,
    what: &str,
    name: &str,
    limit: Limit,
) -> Result<String, EnvError> {
    match value.downcast_ref::<PyStr>() {
        Some(s) => utf8(s, name, limit),
        None => Err(contract(format!(
            "{what}, got {}",
            describe(vm, prelude, value)
        ))),
    }
}

fn tuple_of<'a>(
    vm: &VirtualMachine,
    prelude: &PyObjectRef,
    value: &'a PyObject,
    len: usize,
    shape: &str,
) -> Result<&'a [PyObjectRef], EnvError> {
    let items = value
        .downcast_ref::<PyTuple>()
        .map(|t| t.as_slice())
        .filter(|items| items.len() == len);
    items.ok_or_else(|| contract(format!("{shape}, got {}", describe(vm, prelude, value))))
}

fn info_json(
    vm: &VirtualMachine,
    prelude: &PyObjectRef,
    value: &PyObject,
    call: &str,
) -> Result<String, EnvError> {
    if value.downcast_ref::<PyDict>().is_none() {
        return Err(contract(format!(
            "{call}: info must be a dict, got {}",
            describe(vm, prelude, value)
        )));
    }
    let limit = limits::info();
    let mut out = Capped::new(limit);
    write_json(
        vm,
        prelude,
        value,
        &mut out,
        &mut Walk::default(),
        &At::Root("info"),
    )
    .map_err(|message| contract(format!("{call}: info is not JSON-serialisable: {message}")))?;
    out.finish().map_err(|(size, _)| {
        contract(format!(
            "{call}: the info dict is at least {size} bytes as JSON, {}",
            limit.over()
        ))
    })
}

/// `reset()` must return `(observation: str, info: dict)`.
pub fn reset_result(
    vm: &VirtualMachine,
    prelude: &PyObjectRef,
    value: &PyObject,
) -> Result<ResetResult, EnvError> {
    const SHAPE: &str = "reset() must return a tuple (observation: str, info: dict)";
    let items = tuple_of(vm, prelude, value, 2, SHAPE)?;
    let observation = text(
        vm,
        prelude,
        &items[0],
        "reset(): the observation must be a str",
        "reset(): the observation",
        limits::observation(),
    )?;
    let info = info_json(vm, prelude, &items[1], "reset()")?;
    Ok(ResetResult {
        observation,
        info,
        dropped: Vec::new(),
    })
}

/// `step()` must return `(observation: str, reward: int | float, terminated: bool, truncated: bool, info: dict)`.
pub fn step_result(
    vm: &VirtualMachine,
    prelude: &PyObjectRef,
    value: &PyObject,
) -> Result<StepResult, EnvError> {
    const SHAPE: &str = "step() must return a tuple (observation: str, reward: float, terminated: bool, truncated: bool, info: dict)";
    let items = tuple_of(vm, prelude, value, 5, SHAPE)?;
    let observation = text(
        vm,
        prelude,
        &items[0],
        "step(): the observation must be a str",
        "step(): the observation",
        limits::observation(),
    )?;
    let reward = number(&items[1]).ok_or_else(|| {
        contract(format!(
            "step(): the reward must be an int or float, got {}",
            describe(vm, prelude, &items[1])
        ))
    })?;
    if !reward.is_finite() {
        return Err(contract(format!(
            "step(): the reward must be finite, got {}",
            describe(vm, prelude, &items[1])
        )));
    }
    let flag = |index: usize, name: &str| {
        if is_bool(vm, &items[index]) {
            Ok(items[index].is(&vm.ctx.true_value))
        } else {
            Err(contract(format!(
                "step(): {name} must be a bool, got {}",
                describe(vm, prelude, &items[index])
            )))
        }
    };
    let terminated = flag(2, "terminated")?;
    let truncated = flag(3, "truncated")?;
    let info = info_json(vm, prelude, &items[4], "step()")?;
    Ok(StepResult {
        observation,
        reward,
        terminated,
        truncated,
        info,
    })
}

/// An int or float (bools are ints in Python, as the reference accepts them) as f64.
fn number(value: &PyObject) -> Option<f64> {
    if let Some(f) = value.downcast_ref::<PyFloat>() {
        return Some(f.to_f64());
    }
    value.downcast_ref::<PyInt>().map(|i| {
        use rustpython_vm::common::int::bigint_to_finite_float;
        bigint_to_finite_float(i.as_bigint()).unwrap_or(f64::INFINITY)
    })
}

/// The loaded environment and what the host should know about it.
pub fn loaded(
    vm: &VirtualMachine,
    prelude: &PyObjectRef,
    value: PyObjectRef,
) -> Result<(PyObjectRef, EnvInfo), EnvError> {
    let items = tuple_of(
        vm,
        prelude,
        &value,
        2,
        "internal: load() returns (env, class name)",
    )?;
    let env = items[0].clone();
    let class_name = text(
        vm,
        prelude,
        &items[1],
        "internal: class name",
        "the class name",
        limits::error(),
    )?;
    let max_turns = env.get_attr("max_turns", vm).ok().and_then(|v| {
        if is_bool(vm, &v) {
            None
        } else {
            v.downcast_ref::<PyInt>()
                .and_then(|i| i.as_bigint().try_into().ok())
        }
    });
    let tools = match env.get_attr("get_tools", vm) {
        Err(_) => None,
        Ok(get_tools) => {
            let schemas = get_tools
                .call((), vm)
                .map_err(|exc| exception_error(vm, &exc))?;
            let limit = limits::tools();
            let mut out = Capped::new(limit);
            write_json(
                vm,
                prelude,
                &schemas,
                &mut out,
                &mut Walk::default(),
                &At::Root("get_tools()"),
            )
            .map_err(|message| {
                contract(format!("get_tools() is not JSON-serialisable: {message}"))
            })?;
            Some(out.finish().map_err(|(size, _)| {
                contract(format!(
                    "get_tools(): the tool schemas are at least {size} bytes as JSON, {}",
                    limit.over()
                ))
            })?)
        }
    };
    Ok((
        env,
        EnvInfo {
            class_name,
            max_turns,
            tools,
            used_random: false,
        },
    ))
}

fn write_str(out: &mut Capped, s: &str) {
    if out.fits(s.len() + 2) {
        // serde_json's escaping: quotes, backslashes and control characters; UTF-8 kept as
        // is. Streamed, so a string that crosses the limit is measured, not copied.
        serde_json::to_writer(out, s).expect("a str always serialises");
    } else {
        // Over the limit whatever the escapes: only the size matters now.
        out.count(escaped_len(s));
    }
}

/// The length of `s` as a JSON string with serde_json's escaping, quotes included.
fn escaped_len(s: &str) -> usize {
    let extra: usize = s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 1,
            0x00..=0x1f => 5,
            _ => 0,
        })
        .sum();
    s.len() + 2 + extra
}

fn float_text(value: f64, at: impl std::fmt::Display) -> Result<String, String> {
    if !value.is_finite() {
        return Err(format!("{at} is {value}, which JSON cannot represent"));
    }
    Ok(serde_json::to_string(&value).expect("finite floats serialise"))
}

/// Where a value sits inside the info dict or tool schemas, rendered only for an error message
/// (building the path text for every value used to cost more than the JSON itself).
enum At<'a> {
    Root(&'a str),
    Key(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Root(name) => f.write_str(name),
            At::Key(parent, key) => write!(f, "{parent}[{}]", path_key(key)),
            At::Index(parent, n) => write!(f, "{parent}[{n}]"),
        }
    }
}

/// A dict key as it appears in an error path, cut short.
fn path_key(key: &str) -> String {
    let short = limits::head(key, 64);
    let quoted = serde_json::to_string(short).unwrap_or_default();
    if short.len() < key.len() {
        format!("{quoted}...")
    } else {
        quoted
    }
}

/// A JSON object key as Python's `json` makes one from str, int, float, bool and None keys.
fn json_key(
    vm: &VirtualMachine,
    prelude: &PyObjectRef,
    key: &PyObject,
    at: &At<'_>,
) -> Result<String, String> {
    if let Some(s) = key.downcast_ref::<PyStr>() {
        return s
            .to_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("a key of {at} contains a lone surrogate"));
    }
    if is_bool(vm, key) {
        return Ok(if key.is(&vm.ctx.true_value) {
            "true"
        } else {
            "false"
        }
        .to_owned());
    }
    if vm.is_none(key) {
        return Ok("null".to_owned());
    }
    if let Some(i) = key.downcast_ref::<PyInt>() {
        return int_text(i, format_args!("a key of {at}"));
    }
    if let Some(f) = key.downcast_ref::<PyFloat>() {
        return float_text(f.to_f64(), format_args!("a key of {at}"));
    }
    Err(format!(
        "{at} has a key of type {} ({})",
        key.class().name(),
        describe(vm, prelude, key)
    ))
}

/// An int in decimal, refused (by its size in bits, before any conversion) when it has more
/// than [`MAX_INT_DIGITS`] digits.
fn int_text(value: &PyInt, at: impl std::fmt::Display) -> Result<String, String> {
    let int = value.as_bigint();
    // An int of b bits has at least floor((b - 1) * log10(2)) + 1 digits.
    let min_digits = (int.bits().saturating_sub(1) as f64 * std::f64::consts::LOG10_2) as u64 + 1;
    if min_digits > MAX_INT_DIGITS {
        return Err(format!(
            "{at} is an int of {} bits (at least {min_digits} digits), over the {MAX_INT_DIGITS} \
             digits an int may have as JSON (Python's int_max_str_digits)",
            int.bits()
        ));
    }
    let text = int.to_string();
    let digits = text.trim_start_matches('-').len() as u64;
    if digits > MAX_INT_DIGITS {
        return Err(format!(
            "{at} is an int of {digits} digits, over the {MAX_INT_DIGITS} digits an int may \
             have as JSON (Python's int_max_str_digits)"
        ));
    }
    Ok(text)
}

/// The state of one walk over a value: the containers on the path to the current one (a
/// container met again on its own path is a cycle), and the containers already written in
/// full, with where their JSON lies in the output (a `BTreeMap`: a `HashMap`'s random state
/// would draw WASI entropy).
#[derive(Default)]
struct Walk {
    path: Vec<usize>,
    written: BTreeMap<usize, (usize, usize)>,
}

/// Writes `value` as JSON into `out`. The walk stops as soon as `out` is over its limit (the
/// caller then reports the size written so far, a lower bound), so a value whose JSON would be
/// huge costs at most the limit. A container met again (shared by several parents) is not
/// walked again: its JSON is copied from where it was written (no Python code runs during the
/// walk, so it cannot have changed), so a small graph of shared lists whose JSON expands
/// exponentially costs one walk of each list and copies up to the limit.
fn write_json(
    vm: &VirtualMachine,
    prelude: &PyObjectRef,
    value: &PyObject,
    out: &mut Capped,
    walk: &mut Walk,
    at: &At<'_>,
) -> Result<(), String> {
    if out.over() {
        return Ok(());
    }
    if vm.is_none(value) {
        out.push(b"null");
        return Ok(());
    }
    if is_bool(vm, value) {
        out.push(if value.is(&vm.ctx.true_value) {
            b"true"
        } else {
            b"false"
        });
        return Ok(());
    }
    if let Some(i) = value.downcast_ref::<PyInt>() {
        out.push(int_text(i, at)?.as_bytes());
        return Ok(());
    }
    if let Some(f) = value.downcast_ref::<PyFloat>() {
        out.push(float_text(f.to_f64(), at)?.as_bytes());
        return Ok(());
    }
    if let Some(s) = value.downcast_ref::<PyStr>() {
        let s = s
            .to_str()
            .ok_or_else(|| format!("{at} contains a lone surrogate"))?;
        write_str(out, s);
        return Ok(());
    }
    let id = value as *const PyObject as usize;
    if let Some(&(start, len)) = walk.written.get(&id) {
        out.repeat(start, len);
        return Ok(());
    }
    if walk.path.contains(&id) {
        return Err(format!("{at} refers back to itself (circular reference)"));
    }
    if walk.path.len() >= MAX_JSON_DEPTH {
        return Err(format!(
            "{at} is nested more than {MAX_JSON_DEPTH} levels deep"
        ));
    }
    walk.path.push(id);
    let start = out.size();
    let result = write_container(vm, prelude, value, out, walk, at);
    walk.path.pop();
    if result.is_ok() && !out.over() {
        walk.written.insert(id, (start, out.size() - start));
    }
    result
}

fn write_container(
    vm: &VirtualMachine,
    prelude: &PyObjectRef,
    value: &PyObject,
    out: &mut Capped,
    walk: &mut Walk,
    at: &At<'_>,
) -> Result<(), String> {
    if let Some(dict) = value.downcast_ref::<PyDict>() {
        // Every entry takes at least one byte: a dict too long for what is left is over the
        // limit before its items are copied out.
        if !out.fits(dict.__len__()) {
            out.count(dict.__len__());
            return Ok(());
        }
        out.push(b"{");
        for (n, (key, item)) in dict.items_vec().into_iter().enumerate() {
            if out.over() {
                return Ok(());
            }
            if n > 0 {
                out.push(b",");
            }
            let key = json_key(vm, prelude, &key, at)?;
            write_str(out, &key);
            out.push(b":");
            write_json(vm, prelude, &item, out, walk, &At::Key(at, &key))?;
        }
        if !out.over() {
            out.push(b"}");
        }
        return Ok(());
    }
    let len = if let Some(list) = value.downcast_ref::<PyList>() {
        list.__len__()
    } else if let Some(tuple) = value.downcast_ref::<PyTuple>() {
        tuple.__len__()
    } else {
        0
    };
    if !out.fits(len) {
        out.count(len);
        return Ok(());
    }
    let items: Vec<PyObjectRef> = if let Some(list) = value.downcast_ref::<PyList>() {
        list.borrow_vec().to_vec()
    } else if let Some(tuple) = value.downcast_ref::<PyTuple>() {
        tuple.as_slice().to_vec()
    } else {
        return Err(format!(
            "{at} is a {}, not a JSON type ({})",
            value.class().name(),
            describe(vm, prelude, value)
        ));
    };
    out.push(b"[");
    for (n, item) in items.iter().enumerate() {
        if out.over() {
            return Ok(());
        }
        if n > 0 {
            out.push(b",");
        }
        write_json(vm, prelude, item, out, walk, &At::Index(at, n))?;
    }
    if !out.over() {
        out.push(b"]");
    }
    Ok(())
}
