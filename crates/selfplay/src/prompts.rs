//! Prompt text for the designer, repair, hint and agent roles (written for spade from the
//! method's facts, not copied from the reference).
use serde::{Deserialize, Serialize};

use super::memory::DesignerExamples;

/// The skills environments target (docs/environment-contract.md section 3).
pub const SKILLS: [&str; 9] = [
    "Pattern Recognition",
    "Mathematical Reasoning",
    "Logical Deduction",
    "Strategic Planning",
    "Spatial Reasoning",
    "Causal Inference",
    "Memory Recall",
    "Optimization",
    "Language Understanding",
];

/// Difficulty levels.
pub const DIFFICULTIES: [&str; 3] = ["easy", "medium", "hard"];

/// Which kind of environment the designer is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// A cognitive game answered once with `\boxed{}`.
    SingleAnswer,
    /// A cognitive game over several `\boxed{}` commands.
    MultiTurn,
    /// A `ToolUseBaseEnv` subclass with tools and an `<answer>`.
    ToolUse,
}

/// All variants, in the order the design phase cycles through them.
pub const VARIANTS: [Variant; 3] = [Variant::SingleAnswer, Variant::MultiTurn, Variant::ToolUse];

/// The system prompt of every role but the agent.
pub const DESIGNER_SYSTEM: &str = "You are an expert Python programmer who writes small, correct, \
deterministic game environments for training reasoning agents.";

const CONTRACT: &str = "Write one Python module using only the standard library. It must define \
exactly one class whose name ends in `Env` with:\n\
- `__init__(self, max_turns=N, **kwargs)` that sets all state and calls `self.reset()`;\n\
- `reset(self, seed=None)` that calls `random.seed(seed)` when a seed is given, builds a new task \
and returns `(observation: str, info: dict)`; the observation states the rules, the task and the \
action format;\n\
- `step(self, action: str)` returning `(observation, reward, terminated, truncated, info)` with a \
float reward in [-1, 1]; set `truncated` when `self.turn_count >= self.max_turns`;\n\
- `solution(self)` returning the answer (or a plan of actions) as a string.\n\
Never crash on malformed actions: answer them with a format message and a small negative reward.";

fn variant_rules(v: Variant) -> &'static str {
    match v {
        Variant::SingleAnswer => {
            "The game is answered in a single turn: the agent writes its answer \
inside \\boxed{...}; extract it with `re.search(r\"\\\\boxed\\{(.+?)\\}\", action)`. A correct answer gives \
reward 1.0 and terminated=True; a wrong one gives 0.0."
        }
        Variant::MultiTurn => {
            "The game takes several turns: each action is a command inside \\boxed{...} \
that changes the state, and the observation reports the new state. Give partial rewards in [0, 1] \
for progress, 1.0 with terminated=True on a win."
        }
        Variant::ToolUse => {
            "The class subclasses `ToolUseBaseEnv` (already defined: do not import it). \
In `reset`, call `super().reset(seed)`, set `self._tools` (name -> {\"description\", \"parameters\" JSON \
schema}), `self._state` and `self._expected_answer`, and define one method `tool_<name>(self, **kwargs)` per \
tool. The agent calls tools with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> and answers with \
<answer>...</answer>; the base class implements `step`."
        }
    }
}

/// What the designer is asked to build.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DesignSpec {
    /// Target skill.
    pub skill: String,
    /// Difficulty.
    pub difficulty: String,
    /// Environment kind.
    pub variant: Variant,
    /// Corpus document id.
    pub doc_id: usize,
}

/// The designer's user message.
pub fn designer_prompt(spec: &DesignSpec, document: &str, examples: &DesignerExamples) -> String {
    designer_prompt_with(spec, document, examples, None)
}

/// The designer's user message, with `example_env` (a complete environment in the contract's
/// format) shown before the request when given.
pub fn designer_prompt_with(
    spec: &DesignSpec,
    document: &str,
    examples: &DesignerExamples,
    example_env: Option<&str>,
) -> String {
    let mut p = format!(
        "Design an interactive environment that trains the skill \"{}\" at {} difficulty.\n\n\
         Ground it in one concept from the document below; build a task around that concept \
         without quoting the document.\n\n<document>\n{}\n</document>\n\n{}\n\n{}\n",
        spec.skill,
        spec.difficulty,
        document.trim(),
        CONTRACT,
        variant_rules(spec.variant)
    );
    for (i, ex) in examples.positive.iter().enumerate() {
        p.push_str(&format!(
            "\nExample {} of a good environment (agent win rate {:.2}, regret {:.2}):\n```python\n{}\n```\n",
            i + 1,
            ex.win_rate,
            ex.regret,
            ex.code
        ));
    }
    if !examples.too_easy.is_empty() {
        p.push_str(&format!(
            "\nAvoid games like these, which were too easy: {}.\n",
            examples.too_easy.join(", ")
        ));
    }
    if !examples.too_hard.is_empty() {
        p.push_str(&format!(
            "\nAvoid games like these, which were too hard: {}.\n",
            examples.too_hard.join(", ")
        ));
    }
    if let Some(env) = example_env {
        p.push_str(&format!(
            "\nA complete environment in this format, for another game (write your own game, \
             not this one):\n```python\n{}\n```\n",
            env.trim_end()
        ));
    }
    p.push_str("\nReply with the complete module in one ```python code block.");
    p
}

/// The repair request after a failed validation.
pub fn repair_prompt(source: &str, errors: &str) -> String {
    format!(
        "This environment failed validation.\n\n```python\n{source}\n```\n\nErrors:\n{errors}\n\n\
         {CONTRACT}\n\nFix every error and reply with the complete corrected module in one ```python code block."
    )
}

/// The hint request for an environment's source.
pub fn hint_prompt(source: &str, tool_use: bool) -> String {
    let extra = if tool_use {
        "Describe which tools to call and in what order; do not give concrete IDs, numbers or values."
    } else {
        "Describe how to reason about the task; do not reveal the answer."
    };
    format!(
        "Here is the source of a game an agent will play:\n\n```python\n{source}\n```\n\n\
         Write a strategy hint for the agent in 1 to 3 sentences (under 100 words). {extra} \
         Reply with the hint only."
    )
}

/// The agent's system prompt.
pub fn agent_system(tool_use: bool) -> String {
    if tool_use {
        "You are solving a task with tools. Call a tool with \
         <tool_call>{\"name\": \"tool_name\", \"arguments\": {...}}</tool_call>, one call per reply. \
         When you know the answer, reply with <answer>your answer</answer>."
            .to_string()
    } else {
        "You are playing a game. Think briefly, then give your action inside \\boxed{...}, one \
         action per reply."
            .to_string()
    }
}

/// A worked exchange shown to the agent before its first observation (a few-shot turn): a
/// user message and the reply the agent is shown to give. Examples are prompt, never trained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentExample {
    /// The example's user message (an observation).
    pub user: String,
    /// The example's reply, in the format the environments read (e.g. `\boxed{3}`).
    pub assistant: String,
}

/// Checks that every example has a user message and a reply; the error names the first that
/// does not (counted from 1).
pub fn check_agent_examples(examples: &[AgentExample]) -> std::result::Result<(), String> {
    for (i, ex) in examples.iter().enumerate() {
        if ex.user.trim().is_empty() || ex.assistant.trim().is_empty() {
            return Err(format!(
                "agent example {} needs a non-empty `user` message and `assistant` reply",
                i + 1
            ));
        }
    }
    Ok(())
}

/// The first observation with the hint appended as the method prescribes.
pub fn with_hint(observation: &str, hint: Option<&str>) -> String {
    match hint {
        Some(h) => format!("{observation}\n\nHINT: {h}"),
        None => observation.to_string(),
    }
}
