//! Rebuilding a byte-level BPE `tokenizers::Tokenizer` from GGUF metadata.
use tokenizers::SplitDelimiterBehavior;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, Tokenizer};

use super::gguf::Meta;
use crate::error::{ModelError, Result};

/// GGUF token types that are special (control or user-defined) tokens.
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;

fn strings(meta: &Meta, key: &str) -> Result<Vec<String>> {
    let values = meta
        .get(key)?
        .to_vec()
        .map_err(|e| ModelError::InvalidMetadata(format!("GGUF metadata `{key}`: {e}")))?;
    values
        .iter()
        .map(|v| {
            v.to_string()
                .cloned()
                .map_err(|e| ModelError::InvalidMetadata(format!("GGUF metadata `{key}`: {e}")))
        })
        .collect()
}

/// The split regex of Qwen2's `tokenizer.json` (Qwen2.5 and Qwen3 use the same): contractions,
/// letter runs with one leading non-letter, single digits, punctuation runs, newlines, spaces.
pub const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Builds the tokenizer of `tokenizer.ggml.*` metadata (`gpt2` byte-level BPE models only).
///
/// The pre-tokenizer follows `tokenizer.ggml.pre`: `smollm` and the starcoder family split
/// digits individually before the GPT-2 byte-level split; `gpt2`/`default` use the byte-level
/// split alone; `qwen2` (Qwen2, Qwen2.5 and Qwen3) splits with Qwen's regex
/// ([`QWEN2_SPLIT`]), then maps bytes. Control and user-defined tokens become special added
/// tokens.
pub fn tokenizer_from_gguf(meta: &Meta) -> Result<Tokenizer> {
    let model = meta.string("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(ModelError::Tokenizer(format!(
            "unsupported GGUF tokenizer model `{model}` (only byte-level BPE `gpt2` is supported)"
        )));
    }
    let tokens = strings(meta, "tokenizer.ggml.tokens")?;
    let merges: Vec<(String, String)> = strings(meta, "tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| ModelError::Tokenizer(format!("malformed merge `{m}`")))
        })
        .collect::<Result<_>>()?;
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
    let pre = meta
        .0
        .metadata
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map_or("default", String::as_str);
    let byte_level = ByteLevel::new(false, true, true);
    let pre_tokenizer: PreTokenizerWrapper = match pre {
        "default" | "gpt2" | "gpt-2" => byte_level.into(),
        "smollm" | "starcoder" | "refact" | "codeshell" => {
            Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into()
        }
        "qwen2" => {
            let split = Split::new(
                SplitPattern::Regex(QWEN2_SPLIT.to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| ModelError::Tokenizer(format!("qwen2 pre-tokenizer: {e}")))?;
            Sequence::new(vec![
                split.into(),
                ByteLevel::new(false, false, false).into(),
            ])
            .into()
        }
        other => {
            return Err(ModelError::Tokenizer(format!(
                "unsupported GGUF pre-tokenizer `{other}`"
            )));
        }
    };
    let mut tokenizer = Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    let types: Vec<i32> = match meta.0.metadata.get("tokenizer.ggml.token_type") {
        Some(v) => v
            .to_vec()
            .map_err(|e| ModelError::InvalidMetadata(format!("token_type: {e}")))?
            .iter()
            .map(|t| t.to_i32().unwrap_or(1))
            .collect(),
        None => Vec::new(),
    };
    let special: Vec<AddedToken> = tokens
        .iter()
        .zip(types.iter())
        .filter(|(_, ty)| **ty == CONTROL || **ty == USER_DEFINED)
        .map(|(t, _)| AddedToken::from(t.clone(), true))
        .collect();
    tokenizer.add_special_tokens(&special);
    Ok(tokenizer)
}
