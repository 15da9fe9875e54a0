//! Loading real checkpoints: Hugging Face directories and llama GGUF files.
pub mod gguf;
pub mod gguf_tokenizer;
pub mod hf;
pub mod weights;

use std::path::Path;

use candle_core::Device;
use candle_nn::VarMap;
use tokenizers::Tokenizer;

use crate::chat::ChatTemplate;
use crate::error::{ModelError, Result};
use crate::model::{Decoder, ModelConfig};

/// A model with everything needed to sample from and train it.
#[derive(Clone)]
pub struct LoadedModel {
    /// Hyper-parameters (for a GGUF, rebuilt from its metadata).
    pub config: ModelConfig,
    /// The decoder, reading its weights from `varmap`.
    pub model: Decoder,
    /// The weights.
    pub varmap: VarMap,
    /// The tokenizer.
    pub tokenizer: Tokenizer,
    /// How to render chat messages.
    pub chat: ChatTemplate,
    /// Token ids that end a completion (EOS and the end-of-turn token).
    pub eos_ids: Vec<u32>,
}

impl std::fmt::Debug for LoadedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedModel")
            .field("config", &self.config)
            .field("chat", &self.chat)
            .field("eos_ids", &self.eos_ids)
            .finish_non_exhaustive()
    }
}

impl LoadedModel {
    /// Bundles the parts; the chat template's end-of-turn token joins `eos_ids` when it exists.
    pub fn new(
        config: ModelConfig,
        model: Decoder,
        varmap: VarMap,
        tokenizer: Tokenizer,
        chat: ChatTemplate,
        mut eos_ids: Vec<u32>,
    ) -> Self {
        if let Some(id) = tokenizer.token_to_id(chat.end_of_turn()) {
            eos_ids.push(id);
        }
        eos_ids.sort_unstable();
        eos_ids.dedup();
        Self {
            config,
            model,
            varmap,
            tokenizer,
            chat,
            eos_ids,
        }
    }
}

/// Loads `path`: a directory is read as an HF checkpoint, a `.gguf` file as a llama GGUF.
pub fn load(path: &Path, device: &Device) -> Result<LoadedModel> {
    if !path.exists() {
        return Err(ModelError::MissingFile {
            path: path.to_path_buf(),
        });
    }
    if path.is_dir() {
        hf::load_hf_dir(path, device)
    } else {
        gguf::load_gguf(path, device)
    }
}
