//! Watching the module-global `random` generator while the host's probe runs a load stage.
//!
//! The host runs a source's module (and its constructor) unseeded once, to learn whether the
//! stage may run before `random` is seeded: a stage that drew from the module-global generator,
//! seeded it, or read or replaced its state must run seeded first in every sandbox
//! (`LoadPlan::Seeded` on the host). Comparing the generator's state before and after cannot
//! tell: a module that draws and then puts the state back with `setstate`, or that replaces
//! `random.getstate`, would look untouched and its draw would be the same for every seed.
//!
//! So the generator itself is hooked. When the interpreter boots, before `random` is imported,
//! each method of the native `_random.Random` that draws or reads or writes the state is
//! replaced in the type by a wrapper that notes a call on the module-global instance
//! (`random._inst`) while a watch is on, then calls the original. Every way to reach the
//! generator goes through the type: the module-level functions (bound to `_inst` at import,
//! so to the wrappers), `random.Random`'s Python methods (`self.random()`,
//! `super().getstate()`), and `_random.Random.random(random._inst)` called directly. The
//! wrappers are installed at boot, so every sandbox has them whatever its load plan, and a
//! watch allocates nothing: a snapshot taken after a watched stage is the memory of a sandbox
//! that ran the stage unwatched.

use std::cell::{Cell, RefCell};

use rustpython_vm::builtins::PyType;
use rustpython_vm::function::FuncArgs;
use rustpython_vm::{AsObject, PyObjectRef, PyRef, PyResult, VirtualMachine};

/// The methods of `_random.Random` that draw from, seed, read or write the generator.
/// `__init__` seeds too (`_random.Random.__init__(random._inst, 5)`).
const HOOKED: &[&str] = &[
    "random",
    "getrandbits",
    "seed",
    "getstate",
    "setstate",
    "__init__",
];

thread_local! {
    /// `random._inst`, kept from boot so that a watch neither imports nor allocates.
    static MODULE_RNG: RefCell<Option<PyObjectRef>> = const { RefCell::new(None) };
    /// Whether a watch is on.
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    /// Whether the module-global generator was used since the watch began.
    static USED: Cell<bool> = const { Cell::new(false) };
}

/// Replaces the generator's methods with watching wrappers. Runs at boot, before `random` is
/// imported (its module-level functions are bound when it is).
pub fn install(vm: &VirtualMachine) -> PyResult<()> {
    let class = vm
        .import("_random", 0)?
        .get_attr("Random", vm)?
        .downcast::<PyType>()
        .map_err(|_| vm.new_type_error("_random.Random is not a type"))?;
    // The type lives as long as the interpreter; a method descriptor needs it as `'static`.
    let class: &'static rustpython_vm::Py<PyType> = PyRef::leak(class);
    for &name in HOOKED {
        let interned = vm.ctx.intern_str(name);
        let original = class
            .get_attr(interned)
            .ok_or_else(|| vm.new_attribute_error(format!("_random.Random has no {name}")))?;
        let wrapper = vm.new_method(
            name,
            class,
            move |args: FuncArgs, vm: &VirtualMachine| -> PyResult {
                note(args.args.first());
                original.call(args, vm)
            },
        );
        class.set_attr(interned, wrapper.into());
    }
    Ok(())
}

/// Remembers `random._inst` once `random` is imported (at boot, after [`install`]).
pub fn remember_module_rng(vm: &VirtualMachine) -> PyResult<()> {
    let rng = vm.import("random", 0)?.get_attr("_inst", vm)?;
    MODULE_RNG.with(|cell| *cell.borrow_mut() = Some(rng));
    Ok(())
}

fn note(receiver: Option<&PyObjectRef>) {
    if !WATCHING.get() {
        return;
    }
    let Some(receiver) = receiver else { return };
    MODULE_RNG.with(|cell| {
        if cell.borrow().as_ref().is_some_and(|rng| rng.is(receiver)) {
            USED.set(true);
        }
    });
}

/// Runs `stage` with the watch on when `watch` is true; returns its result and whether it used
/// the module-global generator (always `false` unwatched).
pub fn watching<R>(watch: bool, stage: impl FnOnce() -> R) -> (R, bool) {
    if !watch {
        return (stage(), false);
    }
    /// Ends the watch however `stage` returns.
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            WATCHING.set(false);
        }
    }
    USED.set(false);
    WATCHING.set(true);
    let off = Off;
    let result = stage();
    drop(off);
    let used = USED.replace(false);
    (result, used)
}
