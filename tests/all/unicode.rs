//! No host panic from guest text: environments whose class names, tool names, observations and
//! infos hold arbitrary Unicode (multi-byte characters, combining marks, emoji and ZWJ
//! sequences, NUL, bidi controls, lone surrogates written as Python escapes) go through the
//! recorder, `check` and `fuzz`, and every call ends in a typed result or a typed error.
//!
//! The expected outcome of each generated environment follows from the sandbox contract:
//! text without lone surrogates crosses the boundary exactly as written; a lone surrogate (which
//! no UTF-8 string can hold) in a returned value is a `contract` error of that call, and in the
//! class name or tool schemas one of loading.

use serde_json::{Value, json};
use spade_envtools::check::{CheckOptions, check};
use spade_envtools::fuzz::{FuzzOptions, fuzz};
use spade_envtools::trajectory::{RecordMeta, ReplayOptions, Trajectory, replay};
use spade_envtools::{ActionGen, Style, parse_tools};
use spade_envtools::{Episode, EpisodeError, Record};
use spade_sandbox::{CallError, ErrorKind, SandboxOptions};

use crate::common::{env_dir, env_source, runtime, spade, stderr, stdout};

/// A piece of generated text: how Python source spells it, and the string it is (`None` for a
/// lone surrogate, which Python strings can hold and Rust strings cannot).
struct Piece {
    python: &'static str,
    text: Option<&'static str>,
}

const PIECES: &[Piece] = &[
    Piece {
        python: "abc",
        text: Some("abc"),
    },
    Piece {
        python: "é",
        text: Some("é"),
    },
    Piece {
        python: "中文",
        text: Some("中文"),
    },
    Piece {
        python: "𝔘𝔫𝔦",
        text: Some("𝔘𝔫𝔦"),
    },
    Piece {
        python: "a\\u0301",
        text: Some("a\u{301}"),
    },
    Piece {
        python: "\\u0308\\u0308",
        text: Some("\u{308}\u{308}"),
    },
    Piece {
        python: "🙂",
        text: Some("🙂"),
    },
    Piece {
        python: "👩\\u200d👩\\u200d👧",
        text: Some("👩\u{200d}👩\u{200d}👧"),
    },
    Piece {
        python: "🇯🇵",
        text: Some("🇯🇵"),
    },
    Piece {
        python: "\\x00",
        text: Some("\0"),
    },
    Piece {
        python: "\\u202e",
        text: Some("\u{202e}"),
    },
    Piece {
        python: "\\ufeff",
        text: Some("\u{feff}"),
    },
    Piece {
        python: "\\U0010ffff",
        text: Some("\u{10ffff}"),
    },
    Piece {
        python: "\\\"",
        text: Some("\""),
    },
    Piece {
        python: "\\\\",
        text: Some("\\"),
    },
    Piece {
        python: "\\n",
        text: Some("\n"),
    },
    Piece {
        python: "</tool_call>",
        text: Some("</tool_call>"),
    },
    Piece {
        python: "\\\\boxed{",
        text: Some("\\boxed{"),
    },
    Piece {
        python: "}",
        text: Some("}"),
    },
    Piece {
        python: "\\ud800",
        text: None,
    },
    Piece {
        python: "\\udfff",
        text: None,
    },
];

/// SplitMix64: a seeded generator, so that every run tests the same environments.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A generated string: its Python literal (without quotes) and its value, if it has no lone
/// surrogate.
struct Text {
    python: String,
    text: Option<String>,
}

impl Text {
    /// One to four pieces, none a lone surrogate unless `surrogate`, which puts exactly one in.
    fn generate(rng: &mut Rng, surrogate: bool) -> Text {
        let count = 1 + rng.below(4);
        let at = rng.below(count);
        let mut python = String::new();
        let mut text = Some(String::new());
        for i in 0..count {
            let mut piece = &PIECES[rng.below(PIECES.len())];
            while piece.text.is_none() != (surrogate && i == at) {
                piece = &PIECES[rng.below(PIECES.len())];
            }
            python.push_str(piece.python);
            text = match (text, piece.text) {
                (Some(t), Some(p)) => Some(t + p),
                _ => None,
            };
        }
        Text { python, text }
    }
}

/// A tool-use environment with generated names and text.
struct Case {
    class: Text,
    tool: Text,
    description: Text,
    observation: Text,
    key: Text,
    value: Text,
}

impl Case {
    /// One case in two has a lone surrogate, in one of its texts (those the environment
    /// returns from `reset` twice as often as each of those that loading reads).
    fn generate(rng: &mut Rng) -> Case {
        let site = if rng.below(2) == 0 {
            Some(rng.below(8))
        } else {
            None
        };
        let mut text = |sites: &[usize]| {
            let surrogate = site.is_some_and(|s| sites.contains(&s));
            Text::generate(rng, surrogate)
        };
        Case {
            class: text(&[0]),
            tool: text(&[1]),
            description: text(&[2]),
            key: text(&[3]),
            observation: text(&[4, 5]),
            value: text(&[6, 7]),
        }
    }

    fn source(&self) -> String {
        format!(
            r#"_NAME = "{}Env"
_TOOL = "{}"
_DESC = "{}"
_OBS = "{}"
_KEY = "{}"
_VAL = "{}"


class _Base(ToolUseBaseEnv):
    def __init__(self, max_turns=3):
        super().__init__(max_turns=max_turns)
        self.reset()

    def reset(self, seed=None):
        super().reset(seed)
        self._tools = {{_TOOL: {{"description": _DESC, "parameters": {{"type": "object", "properties": {{_KEY: {{"type": "string"}}}}}}}}}}
        self._expected_answer = _VAL
        return _OBS, {{_KEY: _VAL}}

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return _OBS + obs, reward, terminated, truncated, {{_KEY: [_VAL, action]}}


def _tool(self, **kwargs):
    return _OBS + str(len(kwargs))


setattr(_Base, "tool_" + _TOOL, _tool)
globals()[_NAME] = type(_NAME, (_Base,), {{}})
"#,
            self.class.python,
            self.tool.python,
            self.description.python,
            self.observation.python,
            self.key.python,
            self.value.python
        )
    }

    /// Whether the class name holds a NUL, which Python's `type()` refuses.
    fn class_has_nul(&self) -> bool {
        self.class.python.contains("\\x00")
    }

    /// The class name, tool name, description and info key, if none holds a lone surrogate.
    fn loadable(&self) -> Option<(String, String, String, String)> {
        Some((
            format!("{}Env", self.class.text.clone()?),
            self.tool.text.clone()?,
            self.description.text.clone()?,
            self.key.text.clone()?,
        ))
    }
}

/// The error kinds a call may end in that are bugs of the sandbox, never of the environment.
fn host_side_failure(kind: Option<ErrorKind>) -> bool {
    matches!(
        kind,
        Some(ErrorKind::GuestTrap | ErrorKind::Dead | ErrorKind::Usage)
    )
}

/// Records one episode of `case` and checks every result against the contract.
async fn record_and_check(case: &Case, source: &str, label: &str) {
    let runtime = runtime();
    let record = Record::Memory(RecordMeta::default());
    let mut recorder = Episode::start(&runtime, source, SandboxOptions::seeded(3), record)
        .await
        .unwrap();
    let loaded = recorder.info().cloned();
    match (case.loadable(), &loaded) {
        // Python's type() refuses a NUL in a class name (CPython and the sandbox alike).
        (_, Err(CallError::Load(message))) if case.class_has_nul() => {
            assert!(
                message.contains("ValueError: type name must not contain null characters"),
                "{label}: {message}"
            );
        }
        (Some((class, tool, description, key)), Ok(info)) => {
            assert_eq!(info.class_name, class, "{label}");
            let tools: Value = serde_json::from_str(info.tools.as_deref().unwrap()).unwrap();
            let expected = json!([{"type": "function", "function": {
                "name": tool,
                "description": description,
                "parameters": {"type": "object", "properties": {key: {"type": "string"}}},
            }}]);
            assert_eq!(tools, expected, "{label}");
        }
        (None, Err(CallError::Contract(message) | CallError::Load(message))) => {
            assert!(message.contains("surrogate"), "{label}: {message}");
        }
        (expected, got) => panic!("{label}: loadable {:?}, got {got:?}", expected.map(|e| e.0)),
    }
    if loaded.is_ok() {
        let reset = recorder.reset(Some(3)).await.result;
        let returned = (case.observation.text.clone(), case.value.text.clone());
        match (returned, &reset) {
            ((Some(observation), Some(value)), Ok(reset)) => {
                assert_eq!(reset.observation, observation, "{label}");
                let info_value: Value = serde_json::from_str(&reset.info).unwrap();
                assert_eq!(info_value, json!({case.key.text.clone().unwrap(): value}));
            }
            ((o, v), Err(EpisodeError::Call(CallError::Contract(message))))
                if o.is_none() || v.is_none() =>
            {
                assert!(message.contains("surrogate"), "{label}: {message}");
            }
            (_, got) => panic!("{label}: reset gave {got:?}"),
        }
        if reset.is_ok() {
            let (observation, value) = (
                case.observation.text.clone().unwrap(),
                case.value.text.clone().unwrap(),
            );
            let (tool, key) = (
                case.tool.text.clone().unwrap(),
                case.key.text.clone().unwrap(),
            );
            let call = json!({"name": tool, "arguments": {key.clone(): "x"}});
            let action = format!("<tool_call>{call}</tool_call>");
            let step = recorder.step(&action).await.result;
            let step = step.unwrap_or_else(|err| panic!("{label}: step gave {err}"));
            // The base class reads the call up to the first `</tool_call>`.
            let (expected, reward) = if action.matches("</tool_call>").count() > 1 {
                ("Format error".to_owned(), -0.1)
            } else {
                (format!("Tool result:\n{observation}1"), 0.0)
            };
            assert!(
                step.observation
                    .starts_with(&format!("{observation}{expected}")),
                "{label}: {:?}",
                step.observation
            );
            assert_eq!(
                serde_json::from_str::<Value>(&step.info).unwrap(),
                json!({key.clone(): [value, action]}),
                "{label}"
            );
            assert_eq!((step.reward, step.terminated), (reward, false), "{label}");
            let answer = format!("<answer>{value}</answer>");
            let step = recorder.step(&answer).await.result;
            let step = step.unwrap_or_else(|err| panic!("{label}: answer gave {err}"));
            assert_eq!(
                step.observation,
                format!("{observation}Correct!"),
                "{label}"
            );
            assert_eq!((step.reward, step.terminated), (1.0, true), "{label}");
        }
        let _ = recorder.solution().await;
    }
    let text = recorder.finish().unwrap().trajectory.unwrap();
    let trajectory = Trajectory::parse(&text).unwrap();
    trajectory.verify().unwrap();
    let report = replay(&runtime, &trajectory, &ReplayOptions::default())
        .await
        .unwrap();
    assert_eq!(report.divergence, None, "{label}");
}

#[tokio::test]
async fn arbitrary_unicode_from_the_guest_gives_typed_results_everywhere() {
    let mut rng = Rng(0x5EED_0010);
    let (mut at_load, mut at_reset, mut clean_cases) = (0, 0, 0);
    for i in 0..24 {
        let case = Case::generate(&mut rng);
        let source = case.source();
        let label = format!("case {i}:\n{source}");
        match (case.loadable(), &case.observation.text, &case.value.text) {
            (None, _, _) => at_load += 1,
            (Some(_), Some(_), Some(_)) => clean_cases += 1,
            _ => at_reset += 1,
        }
        record_and_check(&case, &source, &label).await;

        let options = CheckOptions {
            seeds: 2,
            ..CheckOptions::default()
        };
        let report = check(&runtime(), &source, &options).await;
        for finding in &report.findings {
            assert!(!host_side_failure(finding.kind), "{label}: {finding:?}");
        }
        if case.class_has_nul() {
            assert_eq!(report.class_name, None, "{label}");
            assert_eq!(report.codes(), ["load_failed"], "{label}");
        } else if let Some((class, ..)) = case.loadable() {
            assert_eq!(report.class_name, Some(class), "{label}");
        }

        // The action generator itself, on this case's tools and observation text, many times
        // more often than the campaign below reaches it.
        if let (Some(_), Some(observation)) = (case.loadable(), &case.observation.text) {
            let runtime = runtime();
            if let Ok(sandbox) = runtime.sandbox(&source, SandboxOptions::seeded(0)).await {
                let tools = parse_tools(sandbox.info().tools.as_deref());
                assert_eq!(tools.len(), 1, "{label}");
                let mut generator = ActionGen::new(i, tools);
                for _ in 0..2000 {
                    generator.next(observation, Style::Any);
                }
            }
        }

        let options = FuzzOptions {
            seed: i,
            episodes: Some(4),
            ..FuzzOptions::default()
        };
        let report = fuzz(&runtime(), &source, &options, &mut |_| {}).await;
        for finding in &report.findings {
            assert!(
                !host_side_failure(finding.kind)
                    && !matches!(
                        finding.code.as_str(),
                        "host_panic" | "nondeterministic" | "trajectory_unreadable"
                    ),
                "{label}: {finding:?}"
            );
        }
        let clean = case.loadable().is_some()
            && case.observation.text.is_some()
            && case.value.text.is_some();
        if clean && !case.class_has_nul() {
            let codes: Vec<&str> = report.findings.iter().map(|f| f.code.as_str()).collect();
            assert!(!codes.contains(&"contract"), "{label}: {codes:?}");
        }
    }
    assert!(
        at_load >= 2 && at_reset >= 2 && clean_cases >= 4,
        "the generator covers lone surrogates at load ({at_load}) and in reset ({at_reset}), and \
         clean text ({clean_cases})"
    );
}

#[tokio::test]
async fn a_tool_use_env_with_non_ascii_names_checks_and_fuzzes_with_typed_findings() {
    let source = env_source("tool_unicode");
    let report = check(&runtime(), &source, &CheckOptions::default()).await;
    assert_eq!(report.class_name.as_deref(), Some("在庫価値Env"));
    assert!(report.accepted, "{:?}", report.findings);
    let report = fuzz(
        &runtime(),
        &source,
        &FuzzOptions {
            seed: 2,
            episodes: Some(20),
            ..FuzzOptions::default()
        },
        &mut |_| {},
    )
    .await;
    assert_eq!(report.episodes, 20);
    let codes: Vec<&str> = report.findings.iter().map(|f| f.code.as_str()).collect();
    assert!(codes.is_empty(), "{codes:?}");
    assert!(report.replays >= 2);
}

#[test]
fn cli_check_and_fuzz_complete_on_the_non_ascii_tool_env() {
    let env = env_dir("tool_unicode").join("env.py");
    let output = spade(&["check", env.to_str().unwrap(), "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(json["class_name"], "在庫価値Env");
    assert_eq!(json["tool_use"], true);
    let dir = tempfile::tempdir().unwrap();
    let output = spade(&[
        "fuzz",
        env.to_str().unwrap(),
        "--episodes",
        "20",
        "--seed",
        "2",
        "--out",
        dir.path().to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(json["episodes"], 20);
    assert_eq!(json["findings"], json!([]));
}
