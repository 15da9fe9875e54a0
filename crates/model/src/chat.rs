//! Chat templates: ChatML (SmolLM2, Qwen), recognised from the checkpoint's Jinja template.
use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.to_string(),
            content: content.into(),
        }
    }
}

/// A chat format the sampler can render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatTemplate {
    /// `<|im_start|>role\ncontent<|im_end|>\n`, with the system prompt the template inserts
    /// when the conversation has none.
    ChatMl {
        /// The template's default system prompt, if it has one.
        default_system: Option<String>,
    },
}

const IM_START: &str = "<|im_start|>";
const IM_END: &str = "<|im_end|>";

impl ChatTemplate {
    /// Recognises a Jinja chat template; `None` (no template in the checkpoint) means ChatML.
    ///
    /// Only ChatML templates are supported; a literal default system prompt
    /// (`'<|im_start|>system\n...<|im_end|>`) is extracted from the template.
    pub fn from_jinja(source: Option<&str>) -> Result<Self> {
        let Some(src) = source else {
            return Ok(Self::ChatMl {
                default_system: None,
            });
        };
        if !src.contains(IM_START) {
            let head: String = src.chars().take(60).collect();
            return Err(ModelError::ChatTemplate(format!(
                "only ChatML templates are supported, got `{head}...`"
            )));
        }
        // The newline after the role is a Jinja escape in HF files and a real newline in GGUFs.
        let default_system = [
            format!("{IM_START}system\\n"),
            format!("{IM_START}system\n"),
        ]
        .iter()
        .find_map(|marker| src.find(marker.as_str()).map(|i| i + marker.len()))
        .and_then(|start| {
            let rest = &src[start..];
            let end = rest.find(IM_END)?;
            let text = &rest[..end];
            let literal = !text.contains(['{', '}', '\'', '"', '+']);
            (literal && !text.is_empty()).then(|| text.replace("\\n", "\n"))
        });
        Ok(Self::ChatMl { default_system })
    }

    /// Renders `messages`, ending with the assistant header when `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> String {
        let Self::ChatMl { default_system } = self;
        let mut out = String::new();
        if let Some(system) = default_system
            && messages.first().is_none_or(|m| m.role != "system")
        {
            out.push_str(&format!("{IM_START}system\n{system}{IM_END}\n"));
        }
        for m in messages {
            out.push_str(&format!("{IM_START}{}\n{}{IM_END}\n", m.role, m.content));
        }
        if add_generation_prompt {
            out.push_str(&format!("{IM_START}assistant\n"));
        }
        out
    }

    /// A Jinja template equivalent to this one, for `tokenizer_config.json` when saving.
    pub fn to_jinja(&self) -> String {
        let Self::ChatMl { default_system } = self;
        let mut out = String::new();
        if let Some(system) = default_system {
            let system = system.replace('\n', "\\n");
            out.push_str(&format!(
                "{{% if messages[0]['role'] != 'system' %}}{{{{ '{IM_START}system\\n{system}{IM_END}\\n' }}}}{{% endif %}}"
            ));
        }
        out.push_str(&format!(
            "{{% for message in messages %}}{{{{ '{IM_START}' + message['role'] + '\\n' + message['content'] + '{IM_END}' + '\\n' }}}}{{% endfor %}}{{% if add_generation_prompt %}}{{{{ '{IM_START}assistant\\n' }}}}{{% endif %}}"
        ));
        out
    }

    /// The token text that ends an assistant turn.
    pub fn end_of_turn(&self) -> &'static str {
        IM_END
    }
}
