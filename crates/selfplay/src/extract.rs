//! Pulling code, hints and actions out of completions.

/// The first ```python block (or the first ``` block, or an unterminated one to the end).
pub fn python_block(text: &str) -> Option<String> {
    let (start, skip) = match text.find("```python") {
        Some(i) => (i, "```python".len()),
        None => (text.find("```")?, 3),
    };
    let body = &text[start + skip..];
    let body = body.strip_prefix('\n').unwrap_or(body);
    let code = match body.find("```") {
        Some(end) => &body[..end],
        None => body,
    };
    let code = code.trim_end();
    (!code.trim().is_empty()).then(|| format!("{code}\n"))
}

/// The last `\boxed{...}` with balanced braces, as the full `\boxed{...}` text.
pub fn boxed(text: &str) -> Option<String> {
    let mut found = None;
    let mut from = 0;
    while let Some(rel) = text[from..].find("\\boxed{") {
        let start = from + rel;
        let open = start + "\\boxed{".len();
        let mut depth = 1;
        let mut end = None;
        for (i, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(open + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        match end {
            Some(e) => {
                found = Some(text[start..=e].to_string());
                from = e + 1;
            }
            None => break,
        }
    }
    found
}

fn tagged(text: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = text.find(&open)?;
    let end = text[start..].find(&close)? + start + close.len();
    Some(text[start..end].to_string())
}

/// The action to send to the environment: for tool-use envs the first `<tool_call>` or
/// `<answer>` element, for cognitive games the last `\boxed{}`; otherwise the trimmed text
/// itself (the environment answers a format error).
pub fn action(text: &str, tool_use: bool) -> String {
    let found = if tool_use {
        match (text.find("<tool_call>"), text.find("<answer>")) {
            (Some(a), Some(b)) if b < a => tagged(text, "answer"),
            (Some(_), _) => tagged(text, "tool_call").or_else(|| tagged(text, "answer")),
            (None, Some(_)) => tagged(text, "answer"),
            (None, None) => None,
        }
    } else {
        boxed(text)
    };
    found.unwrap_or_else(|| text.trim().to_string())
}

/// A hint from a completion: trimmed, at most `max_words` words; `None` when empty.
pub fn hint(text: &str, max_words: usize) -> Option<String> {
    let t = text.trim();
    let t = t.strip_prefix("HINT:").unwrap_or(t).trim();
    let cut = super::corpus::truncate_words(t, max_words).trim();
    (!cut.is_empty()).then(|| cut.to_string())
}
