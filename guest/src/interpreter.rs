//! The Python interpreter and the one environment instance it holds.

use std::cell::RefCell;

use rustpython_vm::builtins::{PyBaseExceptionRef, PyBytes};
use rustpython_vm::function::{FuncArgs, KwArgs};
use rustpython_vm::{AsObject, Interpreter, PyObjectRef, PyResult, Settings, VirtualMachine};

use crate::convert;
use crate::exports::spade::env::environment::{
    EnvError, EnvInfo, LoadOptions, ResetResult, StepResult,
};

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
    /// Set after a Python `MemoryError`: the interpreter's invariants may no longer hold.
    poisoned: Option<String>,
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

/// Runs `f` on the guest state, booting it first if needed.
pub fn with<R>(f: impl FnOnce(&mut State) -> Result<R, EnvError>) -> Result<R, EnvError> {
    initialize();
    STATE.with(|cell| {
        let mut guard = cell.borrow_mut();
        let state = guard.as_mut().expect("initialised above");
        if let Some(reason) = &state.poisoned {
            return Err(EnvError::Usage(format!(
                "this sandbox is unusable after an earlier failure ({reason}); create a new sandbox"
            )));
        }
        f(state)
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
                for name in WARM_IMPORTS {
                    vm.import(*name, 0)?;
                }
                let scope = vm.new_scope_with_builtins();
                vm.run_string(scope.clone(), INSTALL_MODULE, "<spade-boot>")?;
                let install = scope.globals.get_item("_spade_install", vm)?;
                let mut prelude = vm.ctx.none();
                for (name, source) in PRELUDE_MODULES {
                    prelude = install.call((vm.ctx.new_str(*name), vm.ctx.new_str(*source)), vm)?;
                }
                vm.call_method(&prelude, "install_import_guard", ())?;
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
            poisoned: None,
        }
    }

    fn env(&self) -> Result<PyObjectRef, EnvError> {
        self.env
            .clone()
            .ok_or_else(|| EnvError::Usage("no environment is loaded: call load first".to_owned()))
    }

    pub fn compile(&mut self, source: &str) -> Result<Vec<u8>, EnvError> {
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
        result.map_err(|err| self.note(err))
    }

    pub fn load(
        &mut self,
        source: &str,
        code: &[u8],
        options: LoadOptions,
    ) -> Result<EnvInfo, EnvError> {
        if self.env.is_some() {
            return Err(EnvError::Usage(
                "an environment is already loaded in this sandbox; create a new sandbox".to_owned(),
            ));
        }
        let prelude = self.prelude.clone();
        let result = self.interpreter.enter(|vm| {
            let max_turns = options
                .max_turns
                .map_or_else(|| vm.ctx.none(), |n| vm.ctx.new_int(n).into());
            let loaded = vm
                .call_method(
                    &prelude,
                    "load_code",
                    (
                        vm.ctx.new_str(source),
                        vm.ctx.new_bytes(code.to_vec()),
                        max_turns,
                        vm.ctx.new_int(options.random_seed),
                    ),
                )
                .map_err(|exc| env_error(vm, &prelude, &exc))?;
            convert::loaded(vm, &prelude, loaded)
        });
        match result {
            Ok((env, info)) => {
                self.env = Some(env);
                Ok(info)
            }
            Err(err) => Err(self.note(err)),
        }
    }

    pub fn reset(&mut self, seed: Option<u64>) -> Result<ResetResult, EnvError> {
        let env = self.env()?;
        let prelude = self.prelude.clone();
        let result = self.interpreter.enter(|vm| {
            let kwargs: KwArgs = match seed {
                Some(seed) => [("seed", vm.ctx.new_int(seed).into())]
                    .into_iter()
                    .collect(),
                None => KwArgs::default(),
            };
            let reset = env
                .get_attr("reset", vm)
                .map_err(|exc| env_error(vm, &prelude, &exc))?;
            let value = reset
                .call_with_args(FuncArgs::new(Vec::new(), kwargs), vm)
                .map_err(|exc| env_error(vm, &prelude, &exc))?;
            convert::reset_result(vm, &prelude, &value)
        });
        result.map_err(|err| self.note(err))
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
        result.map_err(|err| self.note(err))
    }

    pub fn solution(&mut self) -> Result<String, EnvError> {
        let env = self.env()?;
        let prelude = self.prelude.clone();
        let result = self.interpreter.enter(|vm| {
            let value = vm
                .call_method(&env, "solution", ())
                .map_err(|exc| env_error(vm, &prelude, &exc))?;
            convert::text(vm, &prelude, &value, "solution() must return a str")
        });
        result.map_err(|err| self.note(err))
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
        result.map_err(|err| self.note(err))
    }

    /// Records that the interpreter is unusable after an out-of-memory error.
    fn note(&mut self, err: EnvError) -> EnvError {
        if let EnvError::OutOfMemory(detail) = &err {
            self.poisoned = Some(format!("Python raised MemoryError: {}", last_line(detail)));
        }
        err
    }
}

/// The last line of a traceback: the exception and its message.
fn last_line(text: &str) -> &str {
    text.lines().last().unwrap_or(text)
}

/// Classifies a Python exception raised by environment code.
fn env_error(vm: &VirtualMachine, prelude: &PyObjectRef, exc: &PyBaseExceptionRef) -> EnvError {
    if exc.fast_isinstance(vm.ctx.exceptions.memory_error) {
        return EnvError::OutOfMemory(format_exception(vm, exc));
    }
    if let Ok(load_error) = prelude.get_attr("LoadError", vm)
        && exc
            .as_object()
            .is_instance(&load_error, vm)
            .unwrap_or(false)
    {
        let message = exc
            .as_object()
            .str(vm)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| "the environment could not be loaded".to_owned());
        return EnvError::Load(message);
    }
    EnvError::Exception(format_exception(vm, exc))
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
