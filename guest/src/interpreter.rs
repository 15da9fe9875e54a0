//! The Python interpreter and the one environment instance it holds.

use std::cell::RefCell;

use rustpython_vm::builtins::{PyBaseExceptionRef, PyBytes, PyStr, PyTuple};
use rustpython_vm::function::{FuncArgs, KwArgs};
use rustpython_vm::{AsObject, Interpreter, PyObjectRef, PyResult, Settings, VirtualMachine};

use crate::convert;
use crate::exports::spade::env::environment::{
    EnvError, EnvInfo, LoadOptions, ResetResult, SizeLimits, StepResult,
};
use crate::limits::{self, Capped};
use crate::rng_watch;

/// Python modules of the sandbox, installed in this order when the interpreter boots.
const PRELUDE_MODULES: &[(&str, &str)] = &[
    ("math_verify", include_str!("../python/math_verify.py")),
    (
        "spade_tool_use",
        include_str!("../python/spade_tool_use.py"),
    ),
    ("spade_prelude", include_str!("../python/spade_prelude.py")),
];

/// Standard-library modules imported at boot so that the snapshot already holds them.
const WARM_IMPORTS: &[&str] = &[
    "random",
    "re",
    "math",
    "json",
    "itertools",
    "collections",
    "functools",
    "heapq",
    "statistics",
    "copy",
    "string",
    "typing",
    "traceback",
    "linecache",
    "fractions",
    "dataclasses",
    "enum",
    "abc",
    "operator",
    "textwrap",
    "decimal",
    "datetime",
    "time",
    "bisect",
    "os",
];

const INSTALL_MODULE: &str = r#"
def _spade_install(name, source):
    import sys, types
    module = types.ModuleType(name)
    module.__file__ = name + ".py"
    sys.modules[name] = module
    exec(compile(source, name + ".py", "exec"), module.__dict__)
    return module
"#;

/// Everything the guest keeps between calls.
pub struct State {
    interpreter: Interpreter,
    prelude: PyObjectRef,
    env: Option<PyObjectRef>,
    /// The environment class and `max_turns` of a load that has not constructed it yet.
    pending: Option<(PyObjectRef, Option<u32>)>,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Boots the interpreter if it is not already (wizer normally did this at build time).
pub fn initialize() {
    STATE.with(|cell| {
        let mut state = cell.borrow_mut();
        if state.is_none() {
            *state = Some(State::boot());
        }
    });
}

/// Runs `f` on the guest state, booting it first if needed. Error text over the error limit
/// becomes a `contract` error that says so.
///
/// A `MemoryError` does not poison the interpreter here: the host's memory limiter knows
/// whether the sandbox's cap was hit (and then drops the whole sandbox); a `MemoryError` the
/// environment raised itself is an ordinary exception.
pub fn with<R>(f: impl FnOnce(&mut State) -> Result<R, EnvError>) -> Result<R, EnvError> {
    initialize();
    STATE.with(|cell| {
        let mut guard = cell.borrow_mut();
        let state = guard.as_mut().expect("initialised above");
        f(state).map_err(limits::bound_error)
    })
}

impl State {
    fn boot() -> State {
        let mut settings = Settings::default();
        // Deterministic str/bytes hashes: set iteration order and hash() must replay exactly.
        settings.hash_seed = Some(0);
        settings.import_site = false;
        settings.ignore_environment = true;
        settings.isolated = true;
        settings.user_site_directory = false;
        settings.write_bytecode = false;
        settings.install_signal_handlers = false;
        settings.argv = vec!["spade".to_owned()];
        // Writes go straight to WASI, where the host captures and caps them per call; nothing
        // stays buffered in the guest between calls, so no flush is needed after each call.
        settings.buffered_stdio = false;
        let builder = Interpreter::builder(settings);
        let defs = rustpython_stdlib::stdlib_module_defs(&builder.ctx);
        let interpreter = builder
            .add_native_modules(&defs)
            .add_frozen_modules(rustpython_pylib::FROZEN_STDLIB)
            .build();
        let prelude = interpreter.enter(|vm| {
            let boot = || -> PyResult<PyObjectRef> {
                rng_watch::install(vm)?;
                for name in WARM_IMPORTS {
                    vm.import(*name, 0)?;
                }
                rng_watch::remember_module_rng(vm)?;
                let scope = vm.new_scope_with_builtins();
                vm.run_string(scope.clone(), INSTALL_MODULE, "<spade-boot>")?;
                let install = scope.globals.get_item("_spade_install", vm)?;
                let mut prelude = vm.ctx.none();
                for (name, source) in PRELUDE_MODULES {
                    prelude = install.call((vm.ctx.new_str(*name), vm.ctx.new_str(*source)), vm)?;
                }
                vm.call_method(&prelude, "install_import_guard", ())?;
                vm.call_method(&prelude, "settle", ())?;
                Ok(prelude)
            };
            match boot() {
                Ok(prelude) => prelude,
                Err(exc) => panic!(
                    "the spade prelude failed to boot:\n{}",
                    format_exception(vm, &exc)
                ),
            }
        });
        State {
            interpreter,
            prelude,
            env: None,
            pending: None,
        }
    }

    fn env(&self) -> Result<PyObjectRef, EnvError> {
        self.env
            .clone()
            .ok_or_else(|| EnvError::Usage("no environment is loaded: call load first".to_owned()))
    }

    pub fn compile(&mut self, source: &str, limits: SizeLimits) -> Result<Vec<u8>, EnvError> {
        limits::set(limits);
        let prelude = self.prelude.clone();
        let result = self.interpreter.enter(|vm| {
            let code = vm
                .call_method(&prelude, "compile_source", (vm.ctx.new_str(source),))
                .map_err(|exc| env_error(vm, &prelude, &exc))?;
            code.downcast_ref::<PyBytes>()
                .map(|bytes| bytes.as_bytes().to_vec())
                .ok_or_else(|| {
                    EnvError::Usage("internal: compile_source did not return bytes".to_owned())
                })
        });
        result
    }

    pub fn load(
        &mut self,
        source: &str,
        code: &[u8],
        options: LoadOptions,
    ) -> Result<EnvInfo, EnvError> {
        if self.env.is_some() || self.pending.is_some() {
            return Err(EnvError::Usage(
                "an environment is already loaded in this sandbox; create a new sandbox".to_owned(),
            ));
        }
        limits::set(options.limits);
        let prelude = self.prelude.clone();
        let class = self.interpreter.enter(|vm| {
            let seed = options
                .random_seed
                .map_or_else(|| vm.ctx.none(), |n| vm.ctx.new_int(n).into());
            // Without a seed, the watch on the module-global generator tells the host whether
            // the module used it (then it must be seeded before the module runs).
            let (class, used_random) = rng_watch::watching(options.random_seed.is_none(), || {
                vm.call_method(
                    &prelude,
                    "exec_module",
                    (
                        vm.ctx.new_str(source),
                        vm.ctx.new_bytes(code.to_vec()),
                        seed,
                    ),
                )
            });
            let class = class.map_err(|exc| env_error(vm, &prelude, &exc))?;
            Ok((class, used_random))
        });
        let (class, used_random) = class?;
        self.pending = Some((class, options.max_turns));
        if !options.construct {
            return Ok(EnvInfo {
                class_name: String::new(),
                max_turns: None,
                tools: None,
                used_random,
            });
        }
        let mut info = self.construct(false)?;
        info.used_random = used_random;
        Ok(info)
    }

    /// Constructs the pending class; with `report_random`, whether the constructor used the
    /// module-global `random` (watched: the host's probe asks this).
    pub fn construct(&mut self, report_random: bool) -> Result<EnvInfo, EnvError> {
        let Some((class, max_turns)) = self.pending.take() else {
            return Err(EnvError::Usage(
                "construct needs a load that did not construct the environment".to_owned(),
            ));
        };
        let prelude = self.prelude.clone();
        let result = self.interpreter.enter(|vm| {
            let max_turns = max_turns.map_or_else(|| vm.ctx.none(), |n| vm.ctx.new_int(n).into());
            // The watch covers `get_tools()`, which the host calls once per load as well.
            let (loaded, used_random) = rng_watch::watching(report_random, || {
                let loaded = vm
                    .call_method(&prelude, "construct", (class, max_turns))
                    .map_err(|exc| env_error(vm, &prelude, &exc))?;
                convert::loaded(vm, &prelude, loaded)
            });
            let (env, mut info) = loaded?;
            info.used_random = used_random;
            Ok((env, info))
        });
        let (env, info) = result?;
        self.env = Some(env);
        Ok(info)
    }

    pub fn reseed(&mut self, seed: u64) -> Result<(), EnvError> {
        if self.pending.is_none() {
            self.env()?;
        }
        let prelude = self.prelude.clone();
        self.interpreter.enter(|vm| {
            vm.call_method(&prelude, "reseed", (vm.ctx.new_int(seed),))
                .map(drop)
                .map_err(|exc| env_error(vm, &prelude, &exc))
        })
    }

    pub fn reset(
        &mut self,
        seed: Option<u64>,
        fields: Option<&str>,
    ) -> Result<ResetResult, EnvError> {
        let env = self.env()?;
        let prelude = self.prelude.clone();
        let result = self.interpreter.enter(|vm| {
            let mut kwargs: Vec<(String, PyObjectRef)> = Vec::new();
            if let Some(seed) = seed {
                kwargs.push(("seed".to_owned(), vm.ctx.new_int(seed).into()));
            }
            let mut dropped = Vec::new();
            if let Some(fields) = fields {
                let split = vm
                    .call_method(
                        &prelude,
                        "split_reset_fields",
                        (env.clone(), vm.ctx.new_str(fields)),
                    )
                    .map_err(|exc| env_error(vm, &prelude, &exc))?;
                let (passed, rest) = split_fields(&split, fields)?;
                kwargs.extend(passed);
                dropped = rest;
            }
            let reset = env
                .get_attr("reset", vm)
                .map_err(|exc| env_error(vm, &prelude, &exc))?;
            let kwargs: KwArgs = kwargs.into_iter().collect();
            let value = reset
                .call_with_args(FuncArgs::new(Vec::new(), kwargs), vm)
                .map_err(|exc| env_error(vm, &prelude, &exc))?;
            let mut result = convert::reset_result(vm, &prelude, &value)?;
            result.dropped = dropped;
            Ok(result)
        });
        result
    }

    pub fn step(&mut self, action: &str) -> Result<StepResult, EnvError> {
        let env = self.env()?;
        let prelude = self.prelude.clone();
        let result = self.interpreter.enter(|vm| {
            let value = vm
                .call_method(&env, "step", (vm.ctx.new_str(action),))
                .map_err(|exc| env_error(vm, &prelude, &exc))?;
            convert::step_result(vm, &prelude, &value)
        });
        result
    }

    pub fn solution(&mut self) -> Result<String, EnvError> {
        let env = self.env()?;
        let prelude = self.prelude.clone();
        let result = self.interpreter.enter(|vm| {
            let value = vm
                .call_method(&env, "solution", ())
                .map_err(|exc| env_error(vm, &prelude, &exc))?;
            convert::text(
                vm,
                &prelude,
                &value,
                "solution() must return a str",
                "solution()'s str",
                limits::solution(),
            )
        });
        result
    }

    pub fn close(&mut self) -> Result<(), EnvError> {
        let env = self.env()?;
        let prelude = self.prelude.clone();
        let result = self.interpreter.enter(|vm| {
            // `close` is optional in the environment contract.
            match env.get_attr("close", vm) {
                Ok(close) => close
                    .call((), vm)
                    .map(drop)
                    .map_err(|exc| env_error(vm, &prelude, &exc)),
                Err(exc) if exc.fast_isinstance(vm.ctx.exceptions.attribute_error) => Ok(()),
                Err(exc) => Err(env_error(vm, &prelude, &exc)),
            }
        });
        result
    }
}

/// Classifies a Python exception raised by environment code.
fn env_error(vm: &VirtualMachine, prelude: &PyObjectRef, exc: &PyBaseExceptionRef) -> EnvError {
    if let Ok(load_error) = prelude.get_attr("LoadError", vm)
        && exc
            .as_object()
            .is_instance(&load_error, vm)
            .unwrap_or(false)
    {
        let limit = limits::error();
        let message = match exc.as_object().str(vm) {
            Ok(s) if !limit.allows(s.byte_len()) => {
                let text = s.to_string_lossy();
                return limits::too_long("load error", s.byte_len(), &text, limit);
            }
            Ok(s) => s.to_string_lossy().into_owned(),
            Err(_) => "the environment could not be loaded".to_owned(),
        };
        return EnvError::Load(message);
    }
    exception_error(vm, exc)
}

/// `exc` as an `exception` error carrying its traceback, measured as it is written: a
/// traceback over the error limit is a `contract` error and is never built in full.
pub fn exception_error(vm: &VirtualMachine, exc: &PyBaseExceptionRef) -> EnvError {
    let limit = limits::error();
    let mut text = Capped::new(limit);
    if vm.write_exception(&mut text, exc).is_err() || text.size() == 0 {
        return EnvError::Exception(format!(
            "{} (the traceback could not be formatted)",
            exc.class().name()
        ));
    }
    match text.finish() {
        Ok(text) => EnvError::Exception(text.trim_end().to_owned()),
        Err((size, start)) => limits::too_long("traceback", size, &start, limit),
    }
}

/// The traceback of `exc` as Python prints it.
pub fn format_exception(vm: &VirtualMachine, exc: &PyBaseExceptionRef) -> String {
    let mut text = String::new();
    if vm.write_exception(&mut text, exc).is_err() || text.is_empty() {
        text = format!(
            "{} (the traceback could not be formatted)",
            exc.class().name()
        );
    }
    text.trim_end().to_owned()
}

/// The `(names, values, dropped)` tuple of the prelude's `split_reset_fields` as keyword
/// arguments and dropped names. Every name must be a distinct key of the host's `fields`
/// object: the environment's code can replace the prelude's function, and the dropped names go
/// back to the host, so this bounds them by what the host sent (issue 53/3: a replaced
/// splitter returned hundreds of MiB of names).
#[allow(clippy::type_complexity)]
fn split_fields(
    split: &PyObjectRef,
    fields: &str,
) -> Result<(Vec<(String, PyObjectRef)>, Vec<String>), EnvError> {
    let odd = || EnvError::Usage("split_reset_fields returned an odd value".to_owned());
    let parts = split.downcast_ref::<PyTuple>().ok_or_else(odd)?.as_slice();
    let [names, values, dropped] = parts else {
        return Err(odd());
    };
    let tuple = |value: &PyObjectRef| {
        value
            .downcast_ref::<PyTuple>()
            .map(|t| t.as_slice().to_vec())
            .ok_or_else(odd)
    };
    // Only the names: a value is skipped unread, so an integer of any size (Python's
    // `json.loads` gives it exactly) is not refused here as out of `f64`'s range.
    let keys: std::collections::BTreeMap<String, serde::de::IgnoredAny> =
        serde_json::from_str(fields)
            .map_err(|err| EnvError::Usage(format!("reset fields are not a JSON object: {err}")))?;
    // Each name is looked up before it is copied, so at most the fields' own names are.
    let mut seen = std::collections::HashSet::new();
    let mut field = |value: &PyObjectRef| {
        let name = value
            .downcast_ref::<PyStr>()
            .ok_or_else(odd)?
            .to_string_lossy();
        match keys.get_key_value(name.as_ref()) {
            Some((key, _)) if seen.insert(key.as_str()) => Ok(key.clone()),
            _ => Err(EnvError::Contract(format!(
                "split_reset_fields named {:?}, which is not one of the reset fields or is named \
                 twice (the environment replaced the prelude's function?)",
                crate::limits::head(&name, 64)
            ))),
        }
    };
    let names = tuple(names)?
        .iter()
        .map(&mut field)
        .collect::<Result<Vec<_>, _>>()?;
    let values = tuple(values)?;
    let dropped = tuple(dropped)?
        .iter()
        .map(&mut field)
        .collect::<Result<Vec<_>, _>>()?;
    if names.len() != values.len() {
        return Err(odd());
    }
    Ok((names.into_iter().zip(values).collect(), dropped))
}
