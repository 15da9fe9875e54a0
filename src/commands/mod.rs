//! One module per subcommand, each with an `execute` method. The subcommands that need a
//! language model (generate, model, bench-model, train, eval, report) are built with the
//! `train` feature (on by default).

/// `println!` that ends the process quietly when stdout is a closed pipe.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::commands::say_line(format_args!($($arg)*))
    };
}

pub mod actions;
pub mod bench;
pub mod check;
pub mod common;
pub mod convert;
pub mod env_arg;
#[cfg(feature = "train")]
pub mod eval;
pub mod fuzz;
#[cfg(feature = "train")]
pub mod generate;
#[cfg(feature = "train")]
pub mod inference;
#[cfg(feature = "train")]
pub mod model;
#[cfg(feature = "train")]
pub mod progress_bar;
pub mod replay;
#[cfg(feature = "train")]
pub mod report;
pub mod run;
pub mod serve;
#[cfg(feature = "train")]
pub mod sft;
#[cfg(feature = "train")]
pub mod train;

use std::path::Path;

use anyhow::{Context as _, bail};

/// Exit code for bad input: a missing or unreadable file, bad arguments.
pub const EXIT_USAGE: u8 = 1;
/// Exit code when the environment failed (load, contract, exception) or hit a limit.
pub const EXIT_ENV_FAILED: u8 = 2;

/// Writes one line to stdout. A closed pipe (`spade run ... | head`) ends the process quietly
/// instead of panicking.
pub fn say_line(line: impl std::fmt::Display) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(err) = writeln!(out, "{line}") {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing to standard output: {err}");
        std::process::exit(i32::from(EXIT_USAGE));
    }
}

/// Prints an error and its causes the way a person wants to read them.
pub fn report_error(err: &anyhow::Error) {
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}

/// The async executor of a command: a tokio multi-thread runtime. (In this crate "runtime"
/// means only the sandbox's [`spade_sandbox::Runtime`].)
pub fn executor() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The executor of a process that drives one sandbox at a time (`spade run`, the startup
/// probe): tokio's current-thread runtime, with no worker threads to start and join. A
/// sandbox call runs on the calling thread either way.
pub fn one_task_executor() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Reads a UTF-8 text file, with messages that name the file and the problem.
pub fn read_text(path: &Path, what: &str) -> anyhow::Result<String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            bail!("{what} '{}' does not exist", path.display())
        }
        Err(err) if path.is_dir() => bail!(
            "{what} '{}' is a directory, not a file ({err})",
            path.display()
        ),
        Err(err) => bail!("cannot read {what} '{}': {err}", path.display()),
    };
    String::from_utf8(bytes).map_err(|err| {
        anyhow::anyhow!(
            "{what} '{}' is not valid UTF-8 text (invalid byte at offset {})",
            path.display(),
            err.utf8_error().valid_up_to()
        )
    })
}

/// The device models run on: the first CUDA GPU with the `cuda` feature, else the CPU.
#[cfg(feature = "train")]
pub fn device() -> anyhow::Result<candle_core::Device> {
    #[cfg(feature = "cuda")]
    {
        Ok(candle_core::Device::new_cuda(0).context("opening CUDA device 0")?)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Ok(candle_core::Device::Cpu)
    }
}

/// The model at `path`, or the default model (with a hint to fetch it when absent).
#[cfg(feature = "train")]
pub fn load_model(path: Option<&Path>) -> anyhow::Result<spade_model::load::LoadedModel> {
    use spade_model::{fetch, load};
    let path: std::path::PathBuf = match path {
        Some(p) => p.to_path_buf(),
        None => {
            let p = fetch::default_model_path();
            if !p.exists() {
                bail!(
                    "the default model is not installed at {}: run `spade model fetch` first, or pass --model",
                    p.display()
                );
            }
            p
        }
    };
    load::load(&path, &device()?).with_context(|| format!("loading model {}", path.display()))
}
