//! The guest's memory layout that makes its own stack's overflow a trap: a tested guarantee.
//!
//! Rust on WebAssembly keeps the stack of its native frames (RustPython's, when it recurses
//! through nested containers in a comparison, a `repr` or a hash) in linear memory, not on the
//! engine's call stack, and nothing checks it for overflow. The linker places it first, at
//! addresses `0..S`, growing down from `S` towards 0, with the static data and the heap above
//! it. An overflow therefore moves the stack pointer below 0, where 32-bit addresses wrap to
//! the top of the 4 GiB address space: far outside a sandbox's memory (at most
//! `Limits::memory_limit`, 512 MiB by default), so the first access there traps with a memory
//! access out of bounds, before anything the interpreter owns is overwritten. The host reports
//! that trap as [`CallError::StackOverflow`](crate::CallError::StackOverflow) (see
//! `outcome::classify_trap`).
//!
//! Were the stack placed after the data (the linker's other layout), an overflow would write
//! over the interpreter's static data silently. The test below reads the guest the build
//! embeds and fails if its layout is not stack first.

#[cfg(test)]
mod tests {
    use wasmparser::{DataKind, Encoding, Operator, Parser, Payload};

    /// One core module of the guest component: its first global's initial value (the stack
    /// pointer, as the linker emits it) and the offsets of its active data segments.
    #[derive(Default)]
    struct Module {
        first_global: Option<(bool, i32)>,
        data_offsets: Vec<i32>,
        data_bytes: usize,
    }

    fn const_i32(expr: &wasmparser::ConstExpr<'_>) -> Option<i32> {
        let mut ops = expr.get_operators_reader();
        match ops.read().ok()? {
            Operator::I32Const { value } => Some(value),
            _ => None,
        }
    }

    fn core_modules(wasm: &[u8]) -> Vec<Module> {
        let mut modules = Vec::new();
        let mut depth_in_module: Option<Module> = None;
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.expect("the embedded guest parses") {
                Payload::Version {
                    encoding: Encoding::Module,
                    ..
                } => depth_in_module = Some(Module::default()),
                Payload::GlobalSection(globals) => {
                    let module = depth_in_module.as_mut().expect("globals are in a module");
                    if let Some(global) = globals.into_iter().next() {
                        let global = global.unwrap();
                        module.first_global =
                            const_i32(&global.init_expr).map(|value| (global.ty.mutable, value));
                    }
                }
                Payload::DataSection(data) => {
                    let module = depth_in_module.as_mut().expect("data is in a module");
                    for segment in data {
                        let segment = segment.unwrap();
                        module.data_bytes += segment.data.len();
                        if let DataKind::Active { offset_expr, .. } = segment.kind {
                            module
                                .data_offsets
                                .push(const_i32(&offset_expr).expect("a constant data offset"));
                        }
                    }
                }
                Payload::End(_) => {
                    if let Some(module) = depth_in_module.take() {
                        modules.push(module);
                    }
                }
                _ => {}
            }
        }
        modules
    }

    #[test]
    fn the_guest_stack_sits_below_its_data_so_an_overflow_wraps_out_of_bounds() {
        let modules = core_modules(crate::cache::artifact::guest_wasm());
        // The interpreter is the module with the static data (the others are small shims).
        let interpreter = modules
            .iter()
            .max_by_key(|m| m.data_bytes)
            .expect("the guest has core modules");
        assert!(interpreter.data_bytes > 1 << 20, "the interpreter's data");
        let (mutable, stack_top) = interpreter
            .first_global
            .expect("the stack pointer is the interpreter's first global");
        assert!(mutable, "the stack pointer is a mutable global");
        let lowest_data = *interpreter.data_offsets.iter().min().unwrap();
        assert!(
            stack_top > 0 && stack_top <= lowest_data,
            "the stack ({stack_top:#x} down to 0) lies below every data segment (the lowest \
             starts at {lowest_data:#x})"
        );
        // Rust's default of 1 MiB, enough for the recursion the Python recursion limit allows.
        assert!(stack_top >= 1 << 20, "a stack of {stack_top} bytes");
        println!("guest stack: 0..{stack_top:#x}; data from {lowest_data:#x}");
    }
}
