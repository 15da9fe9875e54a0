//! The `spade` command-line tool.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// mimalloc instead of glibc's malloc: a decode step makes thousands of small allocations
/// (candle's tensors) between larger ones, and glibc consolidated its free lists on each
/// larger one. Measured on the G=1 decode profile: allocation went from 7% of the sampling
/// thread's time to 3.6%, and G=1 decoding 1.09x faster (median of five alternating runs).
/// The costs, measured: the GRPO update's peak RSS 4.37 GiB instead of 3.96, and a process
/// start to first reset about 1 ms (10%) longer.
///
/// Built with `no_thp` (mimalloc's transparent huge pages off): with them, every 2 MiB region
/// the allocator touched first was zeroed whole, a fifth of a process start's time (14 MiB
/// zeroed for about 3 MiB used). Measured on one build with `MIMALLOC_ALLOW_THP=0` and without,
/// alternating: process start to first reset 7.0-7.5 ms against 8.3-9.9, decoding unchanged
/// (G=1 126-130 against 128-130 tokens/s, G=8 293-297 against 291-295), the first GRPO update
/// of a process 6.6-8.0 s against 13.8-14.0 s (later ones 5.9-7.2 against 6.4-6.7), its peak
/// RSS 4.19 GiB against 4.37.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// spade: self-play in generated, executable environments, with a WebAssembly sandbox.
#[derive(Debug, Parser)]
#[command(name = "spade", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play an environment in the sandbox, one action per line.
    Run(cli::run::RunArgs),
    /// Replay a recorded trajectory bit for bit, or check it for tampering.
    Replay(cli::replay::ReplayArgs),
    /// Measure the sandbox against CPython.
    Bench(cli::bench::BenchArgs),
    /// Sample completions of a chat prompt, streaming to the terminal.
    Generate(cli::generate::Generate),
    /// Manage models (fetch the default one).
    Model(cli::model::Model),
    /// Measure sampling and RL-update throughput for the default model's shape.
    BenchModel(cli::bench_model::BenchModel),
    /// Decide whether an environment may enter training (the reference's probes and more).
    Check(cli::check::CheckArgs),
    /// Hunt for crashes, reward hacks and nondeterminism with generated actions.
    Fuzz(cli::fuzz::FuzzArgs),
    /// Self-play training: design, validate, hint, play, regret, GRPO, checkpoint.
    Train(cli::train::TrainArgs),
    /// Win rate per skill on held-out environments.
    Eval(cli::eval::EvalArgs),
    /// Charts and best/worst environments of a training run, as HTML and SVG.
    Report(cli::report::ReportArgs),
    /// Serve environments over OpenEnv's wire protocol (WebSocket sessions and HTTP).
    Serve(cli::serve::ServeArgs),
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
    let done = |result: anyhow::Result<()>| result.map(|()| ExitCode::SUCCESS);
    let result = match cli.command {
        Command::Run(args) => args.execute(),
        Command::Replay(args) => args.execute(),
        Command::Bench(args) => args.execute(),
        Command::Generate(args) => done(args.execute()),
        Command::Model(args) => done(args.execute()),
        Command::BenchModel(args) => done(args.execute()),
        Command::Check(args) => args.execute(),
        Command::Fuzz(args) => args.execute(),
        Command::Train(args) => done(args.execute()),
        Command::Eval(args) => done(args.execute()),
        Command::Report(args) => done(args.execute()),
        Command::Serve(args) => args.execute(),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            cli::report_error(&err);
            ExitCode::from(cli::EXIT_USAGE)
        }
    }
}
