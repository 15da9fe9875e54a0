//! What a design must pass to join the pool, as pure functions the loop calls: the automatic
//! fixes before validation ([`auto_fix`]) and the options of its `spade check`
//! ([`check_options`]).

use spade_envtools::autofix::autofix;
use spade_envtools::check::CheckOptions;

/// The settings of a design's admission, from [`crate::config::TrainConfig::admission`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionSettings {
    /// Apply the automatic fixes before validation (`auto_fix`).
    pub auto_fix: bool,
    /// `spade check` episodes per probe (`check_seeds`).
    pub check_seeds: u32,
    /// `spade check` steps per episode without `max_turns` (`check_max_steps`).
    pub check_max_steps: u32,
    /// Fuel for one check, summed over its calls (`validation_fuel`).
    pub validation_fuel: u64,
}

/// `spade check`'s options for a design. A design's `solution()` must win when played
/// (`require_winning_solution`), in a multi-turn env too: a solution that gives a wrong answer
/// would make the hint's regret, and so the designer's reward, a loophole (issue 52).
pub fn check_options(settings: &AdmissionSettings) -> CheckOptions {
    CheckOptions {
        seeds: settings.check_seeds,
        max_steps: settings.check_max_steps,
        fuel_budget: Some(settings.validation_fuel),
        require_winning_solution: true,
        ..CheckOptions::default()
    }
}

/// Applies the automatic fixes to a design's code when `enabled`: `code` becomes the fixed
/// source (the one validated and admitted), and the returned entry, for the design record's
/// attempts, lists the fixes. `None` (and `code` unchanged) when off, without code, or when
/// nothing was fixed.
pub fn auto_fix(enabled: bool, code: &mut Option<String>) -> Option<serde_json::Value> {
    let source = code.as_deref().filter(|_| enabled)?;
    let fixed = autofix(source);
    if fixed.fixes.is_empty() {
        return None;
    }
    *code = Some(fixed.source);
    Some(serde_json::json!({ "fixes": fixed.fixes }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BROKEN: &str = "x = f'\\\\boxed{}'\n";

    #[test]
    fn the_fixed_source_replaces_the_code_and_the_record_lists_the_fixes() {
        let mut code = Some(BROKEN.to_owned());
        let entry = auto_fix(true, &mut code).unwrap();
        assert_eq!(code.as_deref(), Some("x = f'\\\\boxed{{}}'\n"));
        assert_eq!(
            entry,
            serde_json::json!({"fixes": [{
                "kind": "f_string_brace",
                "line": 1,
                "description": "line 1: doubled the braces of `{}` in an f-string (an empty \
                                field is a syntax error; it was meant literally)",
            }]})
        );
    }

    #[test]
    fn off_without_code_or_without_a_mistake_nothing_changes() {
        let mut code = Some(BROKEN.to_owned());
        assert_eq!(auto_fix(false, &mut code), None);
        assert_eq!(code.as_deref(), Some(BROKEN));
        let mut none = None;
        assert_eq!(auto_fix(true, &mut none), None);
        let mut valid = Some("x = f'{{}}'\n".to_owned());
        assert_eq!(auto_fix(true, &mut valid), None);
        assert_eq!(valid.as_deref(), Some("x = f'{{}}'\n"));
    }

    #[test]
    fn designs_must_have_a_winning_solution() {
        let settings = AdmissionSettings {
            auto_fix: true,
            check_seeds: 3,
            check_max_steps: 7,
            validation_fuel: 11,
        };
        let options = check_options(&settings);
        assert!(options.require_winning_solution);
        assert_eq!(
            (options.seeds, options.max_steps, options.fuel_budget),
            (3, 7, Some(11))
        );
    }
}
