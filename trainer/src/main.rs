//! The `spade` command-line tool.
use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::SUCCESS
}
