//! The `spade` command-line tool.
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// spade: train language models by self-play.
#[derive(Debug, Parser)]
#[command(name = "spade", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sample completions of a chat prompt, streaming to the terminal.
    Generate(cli::generate::Generate),
    /// Manage models (fetch the default one).
    Model(cli::model::Model),
    /// Measure sampling and RL-update throughput for the default model's shape.
    BenchModel(cli::bench_model::BenchModel),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(c) => c.execute(),
        Command::Model(c) => c.execute(),
        Command::BenchModel(c) => c.execute(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            cli::report_error(&e);
            ExitCode::FAILURE
        }
    }
}
