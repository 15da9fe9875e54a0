//! One module per subcommand, each with an `execute` method.
pub mod bench_model;
pub mod generate;
pub mod model;

use std::path::{Path, PathBuf};

use anyhow::Context;
use spade_trainer::fetch;
use spade_trainer::load::{self, LoadedModel};

/// Prints an error and its causes the way a person wants to read them.
pub fn report_error(err: &anyhow::Error) {
    eprintln!("error: {err}");
    for cause in err.chain().skip(1) {
        eprintln!("  caused by: {cause}");
    }
}

/// The device models run on: the first CUDA GPU with the `cuda` feature, else the CPU.
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
pub fn load_model(path: Option<&Path>) -> anyhow::Result<LoadedModel> {
    let path: PathBuf = match path {
        Some(p) => p.to_path_buf(),
        None => {
            let p = fetch::default_model_path();
            if !p.exists() {
                anyhow::bail!(
                    "the default model is not installed at {}: run `spade model fetch` first, or pass --model",
                    p.display()
                );
            }
            p
        }
    };
    load::load(&path, &device()?).with_context(|| format!("loading model {}", path.display()))
}
