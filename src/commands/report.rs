//! `spade report`: charts and best/worst environment tables for a run directory.
use std::path::PathBuf;

use clap::Args;
use spade_selfplay::report::{ReportOptions, write_report};

/// Arguments of `spade report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Run directory of `spade train` (its --out).
    pub run: PathBuf,
    /// Report directory (default: RUN/report).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Environments in each of the best and worst tables.
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub top: u32,
}

impl ReportArgs {
    /// Writes the report and prints a short summary; warnings go to stderr.
    pub fn execute(self) -> anyhow::Result<()> {
        let options = ReportOptions {
            out: self.out,
            top: self.top as usize,
        };
        let report = write_report(&self.run, &options)?;
        for w in &report.warnings {
            eprintln!("warning: {w}");
        }
        for line in report.summary_lines() {
            say!("{line}");
        }
        Ok(())
    }
}
