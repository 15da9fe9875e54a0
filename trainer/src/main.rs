//! The `spade` command-line tool.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// spade: self-play in generated, executable environments, with a WebAssembly sandbox.
#[derive(Debug, Parser)]
#[command(name = "spade", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Run(cli::run::RunArgs),
    Replay(cli::replay::ReplayArgs),
    Bench(cli::bench::BenchArgs),
    Check(cli::check::CheckArgs),
    Fuzz(cli::fuzz::FuzzArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version land here too, on stdout and with success.
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(cli::EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Command::Run(args) => args.execute(),
        Command::Replay(args) => args.execute(),
        Command::Bench(args) => args.execute(),
        Command::Check(args) => args.execute(),
        Command::Fuzz(args) => args.execute(),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            cli::report_error(&err);
            ExitCode::from(cli::EXIT_USAGE)
        }
    }
}
