//! Structure-aware action generation: the actions an agent (or an attacker) might send.

use serde_json::{Value, json};

use crate::rng::Rng;

/// One tool of a tool-use environment, from its OpenAI function schema.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    /// `(argument name, JSON schema type)`, in schema order.
    pub arguments: Vec<(String, String)>,
}

/// Parses the tool schemas a tool-use environment reports (`EnvInfo::tools`).
pub fn parse_tools(tools_json: Option<&str>) -> Vec<ToolSpec> {
    let Some(text) = tools_json else {
        return Vec::new();
    };
    let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let function = item.get("function").unwrap_or(item);
            let name = function.get("name")?.as_str()?.to_owned();
            let arguments = function
                .pointer("/parameters/properties")
                .and_then(Value::as_object)
                .map(|props| {
                    props
                        .iter()
                        .map(|(k, v)| {
                            let ty = v.get("type").and_then(Value::as_str).unwrap_or("string");
                            (k.clone(), ty.to_owned())
                        })
                        .collect()
                })
                .unwrap_or_default();
            Some(ToolSpec { name, arguments })
        })
        .collect()
}

/// What kind of action to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Anything, garbage included (the fuzzer's mix).
    Any,
    /// Plausible moves only: boxed numbers and words, observation words, tool calls, answers.
    Plausible,
    /// Garbage only: nothing that carries a real answer (no observation words, no numbers
    /// that could be the answer), to detect environments that reward any input.
    Garbage,
}

/// A seeded generator of actions. The same seed and the same inputs give the same actions.
#[derive(Debug, Clone)]
pub struct ActionGen {
    rng: Rng,
    tools: Vec<ToolSpec>,
}

/// Longest action the generator produces, in characters.
pub const MAX_ACTION_CHARS: usize = 100_000;

const WORDS: &[&str] = &[
    "test",
    "yes",
    "no",
    "up",
    "down",
    "left",
    "right",
    "north",
    "south",
    "east",
    "west",
    "A",
    "B",
    "C",
    "D",
    "true",
    "false",
    "None",
    "null",
    "pass",
    "stop",
    "help",
    "look",
    "take",
    "open",
    "0",
    "-1",
    "1/2",
    "3.14",
    "\\frac{1}{2}",
    "50%",
    "(1, 2)",
    "{1, 2}",
    "x",
    "",
];

const UNICODE: &[&str] = &[
    "é",
    "ß",
    "中文",
    "日本語",
    "🙂",
    "👩‍👩‍👧",
    "\u{202e}",
    "\u{200b}",
    "\u{feff}",
    "Ω",
    "∑",
    "½",
    "①",
    "\u{1F600}",
    "𝔘𝔫𝔦",
    "a\u{0301}",
    "\u{10ffff}",
    "\u{7f}",
    "\t",
    "\r\n",
];

const GARBAGE_WORDS: &[&str] = &[
    "qzx",
    "",
    " ",
    "???",
    "ﬀ",
    "lorem ipsum",
    "\\boxed",
    "boxed{",
    "}{",
    "<answer>",
    "</answer>",
    "<tool_call>",
    "\0",
    "\\",
    "%s%n",
    "{0}",
    "${x}",
    "NaN",
    "inf",
];

impl ActionGen {
    /// A generator for an environment with these tools (empty for cognitive games).
    pub fn new(seed: u64, tools: Vec<ToolSpec>) -> ActionGen {
        ActionGen {
            rng: Rng::new(seed),
            tools,
        }
    }

    /// The next action, given the last observation.
    pub fn next(&mut self, observation: &str, style: Style) -> String {
        match style {
            Style::Any => {
                if self.rng.chance(0.5) {
                    self.plausible(observation)
                } else {
                    self.garbage()
                }
            }
            Style::Plausible => self.plausible(observation),
            Style::Garbage => self.garbage(),
        }
    }

    fn plausible(&mut self, observation: &str) -> String {
        let tool_use = !self.tools.is_empty();
        let choice = self.rng.below(if tool_use { 10 } else { 6 });
        match choice {
            0 => format!("\\boxed{{{}}}", self.number()),
            1 => format!("\\boxed{{{}}}", self.rng.pick(WORDS)),
            2 | 3 => match observation_word(&mut self.rng, observation) {
                Some(word) => self.wrap_answer(&word),
                None => format!("\\boxed{{{}}}", self.number()),
            },
            4 => {
                let prose = ["I think the answer is", "Let me try", "Final answer:"];
                let inner = self.number();
                format!("{} \\boxed{{{inner}}}.", self.rng.pick(&prose))
            }
            5 => format!("<answer>{}</answer>", self.number()),
            _ => self.tool_call(observation),
        }
    }

    fn wrap_answer(&mut self, inner: &str) -> String {
        if !self.tools.is_empty() && self.rng.chance(0.5) {
            format!("<answer>{inner}</answer>")
        } else {
            format!("\\boxed{{{inner}}}")
        }
    }

    fn number(&mut self) -> String {
        match self.rng.below(6) {
            0 => self.rng.range(-10, 10).to_string(),
            1 => self.rng.range(0, 1000).to_string(),
            2 => self.rng.range(-1_000_000_000, 1_000_000_000).to_string(),
            3 => format!("{:.2}", self.rng.range(-10_000, 10_000) as f64 / 100.0),
            4 => format!("{}/{}", self.rng.range(-9, 99), self.rng.range(1, 99)),
            _ => (*self.rng.pick(&[
                "1e308",
                "-0",
                "99999999999999999999999",
                "0x1f",
                "1_000",
                "NaN",
                "inf",
            ]))
            .to_owned(),
        }
    }

    fn tool_call(&mut self, observation: &str) -> String {
        let tool = self.rng.pick(&self.tools).clone();
        let name = match self.rng.below(8) {
            0 => "no_such_tool".to_owned(),
            1 => String::new(),
            2 => format!("{}_x", tool.name),
            _ => tool.name.clone(),
        };
        let mut arguments = serde_json::Map::new();
        for (arg, ty) in &tool.arguments {
            if self.rng.chance(0.1) {
                continue; // a missing argument
            }
            let wrong_type = self.rng.chance(0.2);
            let value = match (ty.as_str(), wrong_type) {
                ("integer" | "number", false) => json!(self.rng.range(-5, 100)),
                ("boolean", false) => json!(self.rng.chance(0.5)),
                ("array", false) => json!([self.rng.range(0, 9)]),
                ("object", false) => json!({}),
                (_, false) => match observation_word(&mut self.rng, observation) {
                    Some(word) => json!(word),
                    None => json!(self.rng.pick(WORDS)),
                },
                (_, true) => self.any_json(),
            };
            arguments.insert(arg.clone(), value);
        }
        if self.rng.chance(0.1) {
            arguments.insert("unexpected".to_owned(), json!(1));
        }
        let payload = json!({"name": name, "arguments": arguments}).to_string();
        match self.rng.below(10) {
            0 => {
                // Cut in the middle, counted in characters: names and words taken from the
                // environment may be multi-byte.
                let half = payload.chars().count() / 2;
                format!("<tool_call>{}</tool_call>", truncate_chars(payload, half))
            }
            1 => format!(
                "<tool_call>{{\"name\": \"{}\", \"arguments\": \"not json\"}}</tool_call>",
                tool.name
            ),
            2 => "<tool_call>[1, 2]</tool_call>".to_owned(),
            3 => format!("<tool_call>{payload}"),
            _ => format!("<tool_call>{payload}</tool_call>"),
        }
    }

    fn any_json(&mut self) -> Value {
        match self.rng.below(7) {
            0 => Value::Null,
            1 => json!(self.rng.range(-3, 3)),
            2 => json!(1e300),
            3 => json!("x".repeat(self.rng.below(50) as usize)),
            4 => json!([[[]]]),
            5 => json!({"a": {"b": null}}),
            _ => json!(true),
        }
    }

    fn garbage(&mut self) -> String {
        match self.rng.below(12) {
            0 => String::new(),
            1 => (*self
                .rng
                .pick(&[" ", "\n", "\t", "  \n\t ", "\r\n\r\n", "\u{a0}"]))
            .to_owned(),
            2 => self.long_string(),
            3 => {
                let n = self.rng.range(1, 8) as usize;
                (0..n).map(|_| *self.rng.pick(UNICODE)).collect()
            }
            4 => self.braces(),
            5 => format!("\\boxed{{{}}}", self.braces()),
            6 => format!("\\boxed{{{}}}", self.rng.pick(GARBAGE_WORDS)),
            7 => (*self.rng.pick(GARBAGE_WORDS)).to_owned(),
            8 => format!("<answer>{}</answer>", self.rng.pick(GARBAGE_WORDS)),
            9 => {
                let n = self.rng.range(1, 40) as usize;
                (0..n)
                    .map(|_| char::from_u32(self.rng.range(0x20, 0x7e) as u32).unwrap_or('?'))
                    .collect()
            }
            10 => format!("\\boxed{{}}\\boxed{{{}}}", self.rng.pick(UNICODE)),
            _ => format!("<tool_call>{}</tool_call>", self.rng.pick(GARBAGE_WORDS)),
        }
    }

    /// Nested and unbalanced braces, with and without `\boxed`.
    fn braces(&mut self) -> String {
        let depth = self.rng.range(1, 12) as usize;
        match self.rng.below(6) {
            0 => format!("{}x{}", "{".repeat(depth), "}".repeat(depth)),
            1 => "{".repeat(depth),
            2 => "}".repeat(depth),
            3 => format!("\\boxed{{{}", "{".repeat(depth)),
            4 => format!("{{{{{}}}}}", self.rng.range(0, 99)),
            _ => {
                let n = self.rng.range(2, 30) as usize;
                (0..n)
                    .map(|_| *self.rng.pick(&["{", "}", "\\boxed", "{}", "x"]))
                    .collect()
            }
        }
    }

    /// Up to [`MAX_ACTION_CHARS`] characters: repeated text, deep nesting, or a huge boxed.
    fn long_string(&mut self) -> String {
        let len = match self.rng.below(3) {
            0 => self.rng.range(1_000, 10_000) as usize,
            1 => self.rng.range(10_000, MAX_ACTION_CHARS as i64) as usize,
            _ => MAX_ACTION_CHARS,
        };
        let text = match self.rng.below(4) {
            0 => "a".repeat(len),
            1 => "{".repeat(len),
            2 => format!("\\boxed{{{}}}", "9".repeat(len.saturating_sub(8))),
            _ => "é".repeat(len),
        };
        truncate_chars(text, MAX_ACTION_CHARS)
    }
}

/// A word (or number) taken from the observation, so that plausible play can hit real moves.
fn observation_word(rng: &mut Rng, observation: &str) -> Option<String> {
    let words: Vec<&str> = observation
        .split(|c: char| !(c.is_alphanumeric() || c == '.' || c == '-' || c == '_'))
        .map(|w| w.trim_matches(|c: char| c == '.' || c == '-'))
        .filter(|w| !w.is_empty() && w.len() <= 40)
        .collect();
    if words.is_empty() {
        return None;
    }
    Some((*rng.pick(&words)).to_owned())
}

fn truncate_chars(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => text[..at].to_owned(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolSpec> {
        parse_tools(Some(
            r#"[{"type":"function","function":{"name":"get_price","description":"","parameters":{"type":"object","properties":{"item":{"type":"string"},"n":{"type":"integer"}}}}}]"#,
        ))
    }

    #[test]
    fn parses_openai_tool_schemas() {
        assert_eq!(
            tools(),
            vec![ToolSpec {
                name: "get_price".into(),
                arguments: vec![
                    ("item".into(), "string".into()),
                    ("n".into(), "integer".into())
                ],
            }]
        );
        assert!(parse_tools(Some("not json")).is_empty());
        assert!(parse_tools(None).is_empty());
    }

    #[test]
    fn same_seed_same_actions() {
        for style in [Style::Any, Style::Plausible, Style::Garbage] {
            let mut a = ActionGen::new(9, tools());
            let mut b = ActionGen::new(9, tools());
            let xs: Vec<String> = (0..300).map(|_| a.next("Move up or down", style)).collect();
            let ys: Vec<String> = (0..300).map(|_| b.next("Move up or down", style)).collect();
            assert_eq!(xs, ys);
            let mut c = ActionGen::new(10, tools());
            let zs: Vec<String> = (0..300).map(|_| c.next("Move up or down", style)).collect();
            assert_ne!(xs, zs);
        }
    }

    #[test]
    fn covers_the_action_shapes() {
        let mut generator = ActionGen::new(1, tools());
        let actions: Vec<String> = (0..3000)
            .map(|_| generator.next("Find the plum price", Style::Any))
            .collect();
        let has = |f: &dyn Fn(&str) -> bool| actions.iter().any(|a| f(a));
        assert!(has(&|a| a.is_empty()));
        assert!(has(&|a| !a.is_empty() && a.trim().is_empty()));
        assert!(has(&|a| a.chars().count() == MAX_ACTION_CHARS));
        assert!(
            actions
                .iter()
                .all(|a| a.chars().count() <= MAX_ACTION_CHARS)
        );
        assert!(has(&|a| a.contains("{{")));
        assert!(has(
            &|a| a.starts_with("\\boxed{") && a[7..].parse::<i64>().is_err()
        ));
        assert!(has(
            &|a| a == "\\boxed{plum}" || a == "<answer>plum</answer>"
        ));
        assert!(has(&|a| a.contains("\"name\":\"get_price\"")));
        assert!(has(&|a| a.contains("\"name\":\"no_such_tool\"")));
        assert!(has(&|a| a.contains("<answer>")));
        assert!(has(&|a| !a.is_ascii()));
    }

    #[test]
    fn multi_byte_tool_names_and_observation_words_are_cut_between_characters() {
        let tools = parse_tools(Some(
            r#"[{"type":"function","function":{"name":"価格を調べる","parameters":{"type":"object","properties":{"品目":{"type":"string"}}}}}]"#,
        ));
        let mut generator = ActionGen::new(4, tools);
        let actions: Vec<String> = (0..3000)
            .map(|_| generator.next("「りんご」 🍑 e\u{301}clair の在庫", Style::Any))
            .collect();
        let cut = actions.iter().find(|a| {
            a.strip_prefix("<tool_call>{\"name\":\"価格を調べる\"")
                .and_then(|rest| rest.strip_suffix("</tool_call>"))
                .is_some_and(|rest| !rest.contains("arguments\":{") || !rest.ends_with('}'))
        });
        assert!(cut.is_some(), "no tool call cut in half");
        assert!(actions.iter().any(|a| a.contains("りんご")));
    }

    #[test]
    fn garbage_never_copies_the_observation() {
        let mut generator = ActionGen::new(3, Vec::new());
        for _ in 0..2000 {
            let action = generator.next("secretword 8675309", Style::Garbage);
            assert!(!action.contains("secretword") && !action.contains("8675309"));
        }
    }
}
