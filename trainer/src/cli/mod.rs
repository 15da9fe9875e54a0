//! One module per subcommand, each with an `execute` method.

pub mod bench;
pub mod replay;
pub mod run;

use std::path::Path;

use anyhow::{Context as _, bail};

/// Exit code for bad input: a missing or unreadable file, bad arguments.
pub const EXIT_USAGE: u8 = 1;
/// Exit code when the environment failed (load, contract, exception) or hit a limit.
pub const EXIT_ENV_FAILED: u8 = 2;

/// Prints an error and its causes the way a person wants to read them.
pub fn report_error(err: &anyhow::Error) {
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}

/// A tokio runtime for a command.
pub fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the async runtime")
}

/// Reads a UTF-8 text file, with messages that name the file and the problem.
pub fn read_text(path: &Path, what: &str) -> anyhow::Result<String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            bail!("{what} '{}' does not exist", path.display())
        }
        Err(err) if path.is_dir() => bail!("{what} '{}' is a directory, not a file ({err})", path.display()),
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
