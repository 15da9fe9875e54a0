//! The `spade` command-line tool: one subcommand per file under `commands/`.
//!
//! Built without the default `train` feature (`cargo build --no-default-features`), it has the
//! sandbox's commands only (run, replay, check, fuzz, serve, bench) and links no model code.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;

/// mimalloc instead of glibc's malloc, for the model's sake: a decode step makes thousands of
/// small allocations (candle's tensors) between larger ones, and glibc consolidated its free
/// lists on each larger one. Built with `no_thp`, because with transparent huge pages every
/// 2 MiB region the allocator first touched was zeroed whole. Measured costs and gains are in
/// docs/benchmarks.md ("mimalloc"). A build without the `train` feature keeps the system
/// allocator.
#[cfg(feature = "train")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's settings for the commands that train (`train`, `sft`, `bench-model`), made
/// before the command runs.
#[cfg(feature = "train")]
#[allow(unsafe_code)]
mod allocator {
    use std::ffi::{c_int, c_long};

    // mimalloc's C API (the static library the `mimalloc` crate links).
    unsafe extern "C" {
        fn mi_option_set(option: c_int, value: c_long);
    }

    /// `mi_option_purge_delay` in mimalloc 2's `mi_option_t`.
    const PURGE_DELAY: c_int = 15;

    /// Milliseconds mimalloc waits before it gives freed memory back to the OS: -1, never
    /// (mimalloc's default is 10). A training update frees and allocates gigabytes of
    /// tensors op after op, each op taking longer than 10 ms: with the default, memory was
    /// returned between ops and every page of the next tensor faulted in and was zeroed
    /// afresh, a sixth of the update's time (docs/benchmarks.md, "Training at PyTorch's
    /// speed"). Kept, freed memory serves the next op; the peak RSS is unchanged, and the
    /// process holds its peak until it exits. `MIMALLOC_PURGE_DELAY` in the environment
    /// still decides, for measuring.
    const PURGE_DELAY_MS: c_long = -1;

    /// Applies [`PURGE_DELAY_MS`] unless the environment sets mimalloc's purge delay.
    pub fn configure() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            // SAFETY: mi_option_set takes plain integers and may be called at any time;
            // the option is read when memory is next freed.
            unsafe { mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) };
        }
    }
}

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
    Run(commands::run::RunArgs),
    /// Replay a recorded trajectory bit for bit, or check it for tampering.
    Replay(commands::replay::ReplayArgs),
    /// Measure the sandbox against CPython.
    Bench(commands::bench::sandbox::BenchArgs),
    /// Sample completions of a chat prompt, streaming to the terminal.
    #[cfg(feature = "train")]
    Generate(commands::generate::Generate),
    /// Manage models (fetch the default one).
    #[cfg(feature = "train")]
    Model(commands::model::Model),
    /// Measure sampling and RL-update throughput for the default model's shape.
    #[cfg(feature = "train")]
    BenchModel(commands::bench::model::BenchModel),
    /// Decide whether an environment may enter training (the reference's probes and more).
    Check(commands::check::CheckArgs),
    /// Hunt for crashes, reward hacks and nondeterminism with generated actions.
    Fuzz(commands::fuzz::FuzzArgs),
    /// Write RLVE environments as single-file environments, each checked first.
    Convert(commands::convert::ConvertArgs),
    /// Self-play training: design, validate, hint, play, regret, GRPO, checkpoint.
    #[cfg(feature = "train")]
    Train(commands::train::TrainArgs),
    /// Supervised warm start of the designer on the environment library's design pairs.
    #[cfg(feature = "train")]
    Sft(commands::sft::SftArgs),
    /// Win rate per skill on held-out environments.
    #[cfg(feature = "train")]
    Eval(commands::eval::EvalArgs),
    /// Charts and best/worst environments of a training run, as HTML and SVG.
    #[cfg(feature = "train")]
    Report(commands::report::ReportArgs),
    /// Serve environments over OpenEnv's wire protocol (WebSocket sessions and HTTP).
    Serve(commands::serve::ServeArgs),
}

/// The subcommands that need the `train` feature.
const TRAIN_COMMANDS: [&str; 7] = [
    "generate",
    "model",
    "bench-model",
    "train",
    "sft",
    "eval",
    "report",
];

/// What to tell someone who asked a build without the `train` feature for one of its commands.
fn missing_train_feature(command: &str) -> Option<String> {
    TRAIN_COMMANDS.contains(&command).then(|| {
        format!(
            "`spade {command}` needs a language model, and this spade was built without the \
             `train` feature (a sandbox-only build); build the full one with \
             `cargo build --release` (default features)"
        )
    })
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // A sandbox-only build does not know the model commands: say why.
            if cfg!(not(feature = "train"))
                && err.kind() == clap::error::ErrorKind::InvalidSubcommand
                && let Some(hint) = std::env::args()
                    .nth(1)
                    .as_deref()
                    .and_then(missing_train_feature)
            {
                eprintln!("error: {hint}");
                return ExitCode::from(commands::EXIT_USAGE);
            }
            // --help and --version land here too, on stdout and with success.
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(commands::EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    // Only the commands that train keep freed memory: a server (`spade serve`) and the
    // sandbox commands give it back, so their resident memory follows their load.
    #[cfg(feature = "train")]
    if matches!(
        cli.command,
        Command::Train(_) | Command::Sft(_) | Command::BenchModel(_)
    ) {
        allocator::configure();
    }
    #[cfg(feature = "train")]
    let done = |result: anyhow::Result<()>| result.map(|()| ExitCode::SUCCESS);
    let result = match cli.command {
        Command::Run(args) => args.execute(),
        Command::Replay(args) => args.execute(),
        Command::Bench(args) => args.execute(),
        #[cfg(feature = "train")]
        Command::Generate(args) => done(args.execute()),
        #[cfg(feature = "train")]
        Command::Model(args) => done(args.execute()),
        #[cfg(feature = "train")]
        Command::BenchModel(args) => done(args.execute()),
        Command::Check(args) => args.execute(),
        Command::Fuzz(args) => args.execute(),
        Command::Convert(args) => args.execute(),
        #[cfg(feature = "train")]
        Command::Train(args) => done(args.execute()),
        #[cfg(feature = "train")]
        Command::Sft(args) => done(args.execute()),
        #[cfg(feature = "train")]
        Command::Eval(args) => done(args.execute()),
        #[cfg(feature = "train")]
        Command::Report(args) => done(args.execute()),
        Command::Serve(args) => args.execute(),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            commands::report_error(&err);
            ExitCode::from(commands::EXIT_USAGE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_command_in_a_sandbox_only_build_names_the_missing_feature() {
        for command in TRAIN_COMMANDS {
            let hint = missing_train_feature(command).expect("a train-only command");
            assert!(hint.starts_with(&format!("`spade {command}` needs a language model")));
            assert!(hint.contains("without the `train` feature"), "{hint}");
            assert!(hint.contains("`cargo build --release`"), "{hint}");
        }
        assert_eq!(missing_train_feature("run"), None);
        assert_eq!(missing_train_feature("serve"), None);
        assert_eq!(missing_train_feature("trian"), None);
    }

    #[test]
    fn the_train_only_commands_are_the_ones_the_feature_adds() {
        use clap::CommandFactory as _;
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_owned())
            .collect();
        for command in TRAIN_COMMANDS {
            assert_eq!(
                names.iter().any(|n| n == command),
                cfg!(feature = "train"),
                "{command}"
            );
        }
    }
}
