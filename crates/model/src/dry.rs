//! The DRY ("don't repeat yourself") penalty: a sampler setting that stops a completion from
//! looping.
//!
//! A small model writing a long completion (a designer writing an environment) falls into
//! loops: the same line, the same nested `{"type": {"type": …` again and again until the token
//! budget ends, and a completion cut at its budget is never a valid environment. DRY (the
//! sampler of text-generation-webui and llama.cpp) lowers, before each draw, the logit of every
//! token that would continue a repeat of an earlier stretch of the completion: if the last `L`
//! tokens also occur earlier, followed there by token `t`, and `L >= allowed_length`, then
//! `t`'s logit falls by `multiplier * base^(L - allowed_length)`. Short repeats (a `self.`, a
//! `return obs, 0.0, False`) cost nothing; a repeat that grows past `allowed_length` is pushed
//! out exponentially fast, so the model has to write something else.
//!
//! Differences from llama.cpp's: the context is the completion only (copying from the prompt,
//! a document, is not a loop), and there are no sequence breakers (in code a line break is not
//! a boundary of a loop; it is the loop).
//!
//! The penalty changes what is drawn, not the log-probability reported for it: that stays the
//! model's own, the quantity the training path recomputes (as with top-k and top-p).

/// DRY settings. `allowed_length` is in tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dry {
    /// Logit penalty at a repeat of exactly `allowed_length` tokens (llama.cpp: 0.8).
    pub multiplier: f32,
    /// Growth of the penalty per token of repeat past `allowed_length` (llama.cpp: 1.75).
    pub base: f32,
    /// The longest repeat that is free (llama.cpp: 2, for prose; code repeats more).
    pub allowed_length: usize,
}

/// Repeats longer than `allowed_length + MAX_EXCESS` weigh as that length: the penalty is
/// already past any logit gap (1.75^40 is about 5e9), and the search per token stays bounded.
const MAX_EXCESS: usize = 40;

impl Dry {
    /// Checks the settings: `multiplier >= 0`, `base >= 1` (both finite) and
    /// `allowed_length >= 1`; the error says which is wrong.
    pub fn check(&self) -> Result<(), String> {
        if !(self.multiplier >= 0.0 && self.multiplier.is_finite()) {
            return Err(format!(
                "the DRY multiplier must be finite and >= 0, got {}",
                self.multiplier
            ));
        }
        if !(self.base >= 1.0 && self.base.is_finite()) {
            return Err(format!(
                "the DRY base must be finite and >= 1, got {}",
                self.base
            ));
        }
        if self.allowed_length == 0 {
            return Err("the DRY allowed length must be at least 1 token".into());
        }
        Ok(())
    }

    /// The penalty of a repeat of `len` tokens (0 below `allowed_length`).
    pub fn penalty(&self, len: usize) -> f32 {
        if len < self.allowed_length {
            return 0.0;
        }
        let excess = (len - self.allowed_length).min(MAX_EXCESS);
        self.multiplier * self.base.powi(excess as i32)
    }

    /// The penalised tokens after `tokens` (a completion so far), each with the penalty to
    /// subtract from its logit, in token order. A token is penalised when some earlier
    /// position of `tokens` holds it right after a stretch equal to the last `L >=
    /// allowed_length` tokens; its penalty is that of the longest such `L`.
    pub fn penalties(&self, tokens: &[u32]) -> Vec<(u32, f32)> {
        let n = tokens.len();
        if n == 0 || self.multiplier <= 0.0 {
            return Vec::new();
        }
        let cap = self.allowed_length + MAX_EXCESS;
        // longest[t]: the longest repeat that token t would extend.
        let mut longest: Vec<(u32, usize)> = Vec::new();
        for i in 1..n {
            // The stretch ending at i - 1 against the completion's end, back to at most `cap`.
            let mut len = 0;
            while len < i.min(cap) && tokens[i - 1 - len] == tokens[n - 1 - len] {
                len += 1;
            }
            if len >= self.allowed_length.max(1) {
                let t = tokens[i];
                match longest.iter_mut().find(|(u, _)| *u == t) {
                    Some((_, l)) => *l = (*l).max(len),
                    None => longest.push((t, len)),
                }
            }
        }
        longest.sort_unstable_by_key(|&(t, _)| t);
        longest
            .into_iter()
            .map(|(t, len)| (t, self.penalty(len)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dry(allowed_length: usize) -> Dry {
        Dry {
            multiplier: 1.0,
            base: 2.0,
            allowed_length,
        }
    }

    #[test]
    fn a_repeat_of_the_allowed_length_penalises_the_token_that_followed_it() {
        // The end "1 2" occurred at positions 0-1, followed by 3: 3 gets 1 * 2^0.
        assert_eq!(dry(2).penalties(&[1, 2, 3, 1, 2]), vec![(3, 1.0)]);
        // One token of repeat is below the allowed length: nothing.
        assert!(dry(2).penalties(&[1, 2, 3, 1]).is_empty());
        // The same with allowed length 1: "1" was followed by 2.
        assert_eq!(dry(1).penalties(&[1, 2, 3, 1]), vec![(2, 1.0)]);
    }

    #[test]
    fn the_penalty_grows_with_the_longest_repeat() {
        // A loop of period 3, "5 6 7" three times then "5 6": the end "5 6 7 5 6 7 5 6" is 8
        // long and also ends at position 4 ("5 6 7 5 6" is 5 long there, followed by 7), and at
        // position 1 ("5 6", 2 long, followed by 7). Token 7 takes the longest, 5 tokens:
        // 1 * 2^(5 - 2) = 8.
        let t = [5, 6, 7, 5, 6, 7, 5, 6];
        assert_eq!(dry(2).penalties(&t), vec![(7, 8.0)]);
        // Two different followers of two repeats: "9 4" after "1 2" and "1 2 3"... by hand:
        // [1, 2, 9, 3, 1, 2, 4, 3, 1, 2]: the end "3 1 2" matches at positions 3-5 (followed
        // by 4, length 3), "1 2" at 0-1 (followed by 9, length 2).
        let t = [1, 2, 9, 3, 1, 2, 4, 3, 1, 2];
        assert_eq!(dry(2).penalties(&t), vec![(4, 2.0), (9, 1.0)]);
    }

    #[test]
    fn nothing_is_penalised_without_a_repeat_or_with_multiplier_zero() {
        assert!(dry(2).penalties(&[]).is_empty());
        assert!(dry(2).penalties(&[1, 2, 3, 4, 5]).is_empty());
        let off = Dry {
            multiplier: 0.0,
            ..dry(2)
        };
        assert!(off.penalties(&[5, 6, 7, 5, 6, 7, 5, 6]).is_empty());
    }

    #[test]
    fn bad_settings_are_refused_with_what_is_wrong() {
        assert_eq!(dry(2).check(), Ok(()));
        let neg = Dry {
            multiplier: -1.0,
            ..dry(2)
        };
        assert_eq!(
            neg.check(),
            Err("the DRY multiplier must be finite and >= 0, got -1".into())
        );
        let base = Dry {
            base: 0.5,
            ..dry(2)
        };
        assert_eq!(
            base.check(),
            Err("the DRY base must be finite and >= 1, got 0.5".into())
        );
        assert_eq!(
            dry(0).check(),
            Err("the DRY allowed length must be at least 1 token".into())
        );
    }

    #[test]
    fn a_long_loop_is_penalised_at_the_capped_length() {
        // A run of one token: every earlier position repeats, the longest n - 1 tokens.
        let run = vec![4u32; 200];
        let p = dry(8).penalties(&run);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, 4);
        assert_eq!(p[0].1, 2f32.powi(MAX_EXCESS as i32));
        assert!(p[0].1.is_finite());
    }
}
