//! The solution probe: `solution()` played in the environment's action format.
//!
//! Whether a solution that does not win is an error depends on the kind of game, judged by its
//! behaviour: in a single-answer game (one action decides the episode: a reference probe step,
//! a garbage or random action, or the solution's first action ended an episode on its first
//! step) the solution is the answer and must win. In a multi-turn game `solution()` may be a
//! plan in words (the contract allows "a reference action sequence / plan"), which cannot
//! always be played as given, so a solution that does not win is a warning that says so.
//!
//! With [`CheckOptions::require_winning_solution`](super::CheckOptions) (the default) a
//! solution must win when played in every game: one that is played and does not win is a
//! `solution_does_not_win` error, and one that cannot be played as given (several lines or
//! over 100 characters with no `\boxed{}`, `<tool_call>` or `<answer>` in it) is a
//! `solution_plan_does_not_win` error, because whether a plan in words wins cannot be decided
//! without a reader that turns it into actions: a rejection is the only verdict that leaves no
//! loophole. A short one-line plan in words (`"Toggle each lamp that is off"`) cannot be told
//! from a wrong short answer, so it is played as one, and rejected when it does not win.

use spade_sandbox::EnvInfo;

use super::{Checker, Played};
use crate::oracles::{Severity, Violation, clip};

/// The actions that play a solution.
#[derive(Debug, PartialEq)]
pub(super) struct SolutionPlan {
    pub actions: Vec<String>,
    /// Short and regular enough to play; a prose description is not.
    pub machine_readable: bool,
}

/// The actions `solution` stands for: each `\boxed{...}` of it, each `<tool_call>`/`<answer>`
/// element (which may span lines), or the whole text wrapped in the env's answer format.
pub(super) fn solution_actions(solution: &str, tool_use: bool) -> SolutionPlan {
    let text = solution.trim();
    let boxed = boxed_contents(text);
    if !boxed.is_empty() {
        return SolutionPlan {
            actions: boxed
                .into_iter()
                .map(|b| format!("\\boxed{{{b}}}"))
                .collect(),
            machine_readable: true,
        };
    }
    let tagged = tagged_elements(text);
    if !tagged.is_empty() {
        return SolutionPlan {
            actions: tagged,
            machine_readable: true,
        };
    }
    let machine_readable = !text.is_empty() && !text.contains('\n') && text.chars().count() <= 100;
    let action = if tool_use {
        format!("<answer>{text}</answer>")
    } else {
        format!("\\boxed{{{text}}}")
    };
    SolutionPlan {
        actions: vec![action],
        machine_readable,
    }
}

/// The contents of every `\boxed{...}` in `text`, braces balanced.
pub(super) fn boxed_contents(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("\\boxed{") {
        let body = &rest[at + 7..];
        let mut depth = 1;
        let mut end = None;
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(i);
                        break;
                    }
                }
                _ => {}
            }
        }
        match end {
            Some(i) => {
                out.push(body[..i].to_owned());
                rest = &body[i + 1..];
            }
            None => break,
        }
    }
    out
}

/// Every complete `<tool_call>...</tool_call>` and `<answer>...</answer>` element of `text`, in
/// order, each as one action (a pretty-printed tool call spans several lines).
fn tagged_elements(text: &str) -> Vec<String> {
    const TAGS: [(&str, &str); 2] = [("<tool_call>", "</tool_call>"), ("<answer>", "</answer>")];
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let next = TAGS
            .iter()
            .filter_map(|(open, close)| rest.find(open).map(|at| (at, *open, *close)))
            .min_by_key(|(at, _, _)| *at);
        let Some((at, open, close)) = next else {
            break;
        };
        let after = &rest[at + open.len()..];
        let Some(end) = after.find(close) else {
            break;
        };
        out.push(format!("{open}{}{close}", &after[..end]));
        rest = &after[end + close.len()..];
    }
    out
}

/// How the solution played.
struct SolutionPlay {
    won: bool,
    /// The episode ended (terminated or truncated).
    ended: bool,
    /// It ended on the plan's first action.
    ended_first: bool,
    steps: u64,
}

impl Checker<'_> {
    /// Plays the solution from `reset(seed)`.
    pub(super) async fn solution_episode(&mut self, info: &EnvInfo, seed: u64) -> Played {
        let mut played = Played {
            won: false,
            failed: false,
        };
        let mut recording = self.probe(seed, "check:solution").await;
        let mut play = SolutionPlay {
            won: false,
            ended: false,
            ended_first: false,
            steps: 0,
        };
        let mut problem: Option<(Severity, Violation)> = None;
        match recording.reset(Some(seed)).await.sandboxed() {
            Err(err) => {
                problem = Some((Severity::Error, self.failure("reset_failed", "reset", &err)))
            }
            Ok(_) => match recording.solution().await.sandboxed() {
                Err(err) => {
                    problem = Some((
                        Severity::Error,
                        self.failure("solution_failed", "solution()", &err),
                    ));
                }
                Ok(solution) => {
                    let plan = solution_actions(&solution, info.tools.is_some());
                    for action in &plan.actions {
                        play.steps += 1;
                        match recording.step(action).await.sandboxed() {
                            Err(err) => {
                                problem = Some((
                                    Severity::Error,
                                    self.failure("step_failed", "step", &err),
                                ));
                                break;
                            }
                            Ok(step) if step.terminated || step.truncated => {
                                play.won = step.terminated && step.reward > 0.0;
                                play.ended = true;
                                play.ended_first = play.steps == 1;
                                break;
                            }
                            Ok(_) => {}
                        }
                    }
                    if problem.is_none() && !play.won {
                        problem = Some(self.solution_verdict(&solution, &plan, &play, seed));
                    }
                }
            },
        }
        played.won = play.won;
        let (text, _) = self.finish_episode(recording, play.steps);
        if let Some((severity, v)) = problem {
            played.failed = severity == Severity::Error;
            self.add(severity, v, Some(seed), Some(&text));
        }
        played
    }

    /// The finding for a solution that did not win: an error in a single-answer game, a
    /// warning in a multi-turn one (see the module doc).
    fn solution_verdict(
        &mut self,
        solution: &str,
        plan: &SolutionPlan,
        play: &SolutionPlay,
        seed: u64,
    ) -> (Severity, Violation) {
        if play.ended_first && self.single_answer.is_none() {
            self.single_answer = Some(format!(
                "the solution's first action ended the episode (seed {seed})"
            ));
        }
        self.report.stats.single_answer = Some(self.single_answer.is_some());
        let how = if play.ended {
            "ended without a win"
        } else {
            "did not end the episode"
        };
        let shown = format!("{:?}", clip(solution, 200));
        let played = format!(
            "played as {} action{} in the env's action format it {how} (seed {seed})",
            play.steps,
            if play.steps == 1 { "" } else { "s" }
        );
        let single_answer_error = self.single_answer.is_some() && plan.machine_readable;
        if self.options.require_winning_solution && !single_answer_error {
            return (Severity::Error, strict_verdict(&shown, &played, plan));
        }
        match (&self.single_answer, plan.machine_readable) {
            (Some(evidence), true) => (
                Severity::Error,
                Violation::new(
                    "solution_does_not_win",
                    format!(
                        "solution() returned {shown}; {played}. The env is single-answer by its \
                         behaviour ({evidence}), so its solution must win"
                    ),
                ),
            ),
            (Some(evidence), false) => (
                Severity::Warning,
                Violation::new(
                    "solution_plan_does_not_win",
                    format!(
                        "solution() returned {shown}, which is not one short answer (several \
                         lines or over 100 characters), so it could not be played as given; \
                         {played}. The env is single-answer by its behaviour ({evidence}): \
                         check that its answer is what solution() returns"
                    ),
                ),
            ),
            (None, _) => (
                Severity::Warning,
                Violation::new(
                    "solution_plan_does_not_win",
                    format!(
                        "solution() returned {shown}, which could not be played as given: \
                         {played}. The env is multi-turn by its behaviour (no probe, garbage or \
                         random action ended an episode on its first step), where solution() \
                         may be a plan in words, so this is a warning"
                    ),
                ),
            ),
        }
    }
}

/// The finding for a solution that did not win under `require_winning_solution`, where the
/// lenient judgement would only warn (a multi-turn game, or a plan that cannot be played).
fn strict_verdict(shown: &str, played: &str, plan: &SolutionPlan) -> Violation {
    const WHY: &str = "A solution must win when played (require_winning_solution): return the \
                       answer, or in a multi-turn env the winning actions (one \\boxed{...} or \
                       <tool_call>/<answer> element per step)";
    if plan.machine_readable {
        Violation::new(
            "solution_does_not_win",
            format!("solution() returned {shown}; {played}. {WHY}"),
        )
    } else {
        Violation::new(
            "solution_plan_does_not_win",
            format!(
                "solution() returned {shown}, which is not one short answer (several lines or \
                 over 100 characters, with no \\boxed{{}}, <tool_call> or <answer> in it), so \
                 it could not be played as given; {played}. Whether a plan in words wins cannot \
                 be decided by playing it. {WHY}"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(solution: &str, tool_use: bool) -> (Vec<String>, bool) {
        let p = solution_actions(solution, tool_use);
        (p.actions, p.machine_readable)
    }

    #[test]
    fn solutions_become_actions() {
        assert_eq!(actions("42", false), (vec!["\\boxed{42}".to_owned()], true));
        assert_eq!(
            actions("\\boxed{up} \\boxed{left}", false).0,
            vec!["\\boxed{up}".to_owned(), "\\boxed{left}".to_owned()]
        );
        assert_eq!(
            actions("12.5", true).0,
            vec!["<answer>12.5</answer>".to_owned()]
        );
        assert!(!actions("First call the tool,\nthen add", true).1);
        assert_eq!(
            boxed_contents("\\boxed{\\frac{1}{2}} x \\boxed{3"),
            vec!["\\frac{1}{2}".to_owned()]
        );
    }

    #[test]
    fn tagged_solutions_keep_multi_line_elements_whole() {
        let plan = "<tool_call>{\n  \"name\": \"price\",\n  \"arguments\": {}\n}</tool_call>\n\
                    then <answer>12</answer> <answer>unclosed";
        assert_eq!(
            actions(plan, true),
            (
                vec![
                    "<tool_call>{\n  \"name\": \"price\",\n  \"arguments\": {}\n}</tool_call>"
                        .to_owned(),
                    "<answer>12</answer>".to_owned()
                ],
                true
            )
        );
    }
}
