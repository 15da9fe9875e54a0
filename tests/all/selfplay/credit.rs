//! Credit assignment (the SPADE method's, docs/environment-contract.md section 3) from
//! hand-computed examples: no model, no sandbox. Every expected number below is worked out in
//! the comment beside it, from the rules, not read off the implementation.
use spade_model::grpo::GrpoSample;
use spade_model::schedule::{DecayKind, LrSchedule};
use spade_selfplay::Role;
use spade_selfplay::credit::{
    self, AgentBaseline, Baselines, CreditConfig, Design, EmaStart, Episode, Group, Trained,
    Validity,
};
use spade_selfplay::policy::Sampled;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn sampled(prompt: Vec<u32>, tokens: Vec<u32>) -> Sampled {
    Sampled {
        logprobs: tokens
            .iter()
            .map(|&t| -(f64::from(t) / 100.0) as f32)
            .collect(),
        text: String::new(),
        prompt,
        tokens,
    }
}

fn design(skill: &str, reward: f64) -> Design {
    Design {
        rollout: 0,
        skill: skill.into(),
        first: sampled(vec![1, 2], vec![3, 4, 5]),
        repairs: vec![sampled(vec![1, 9], vec![6])],
        validity: Validity::FirstAttempt,
        reward,
    }
}

fn design_of(rollout: u64, skill: &str, validity: Validity, reward: f64) -> Design {
    Design {
        rollout,
        validity,
        ..design(skill, reward)
    }
}

/// An episode whose turns chain exactly: turn k's prompt is turn k-1's prompt, its completion
/// and one observation token.
fn episode(game: &str, hint: bool, ret: f64, turns: usize) -> Episode {
    let mut out = Vec::new();
    let mut ctx: Vec<u32> = vec![100, 101];
    for k in 0..turns {
        let completion = vec![10 + k as u32, 11 + k as u32];
        out.push(sampled(ctx.clone(), completion.clone()));
        ctx.extend(completion);
        ctx.push(200 + k as u32);
    }
    Episode {
        game: game.into(),
        hint,
        ret,
        turns: out,
    }
}

fn cfg() -> CreditConfig {
    CreditConfig {
        regen_interval: 4,
        ..CreditConfig::default()
    }
}

fn advantages_of(batch: &[Trained], role: Role) -> Vec<f64> {
    batch
        .iter()
        .filter(|t| t.role == role)
        .map(|t| t.sample.advantage)
        .collect()
}

#[test]
fn designer_advantages_are_skill_centred_regrets_times_the_scale_each_its_own_group() {
    // Skill A: regrets 0.5 and 0.1 (mean 0.3); skill B: 0.0 and 0.6 (mean 0.3).
    let designs = vec![
        design("A", 0.5),
        design("A", 0.1),
        design("B", 0.0),
        design("B", 0.6),
    ];
    // 8 no-hint episodes (the hint ones do not count) / 4 designs * regen 4 = 8.
    let mut episodes: Vec<Episode> = (0..8)
        .map(|i| episode("g", false, f64::from(i % 2), 1))
        .collect();
    episodes.extend((0..8).map(|_| episode("g", true, 1.0, 1)));
    let batch = credit::assign(&designs, &episodes, &cfg(), &mut Baselines::default(), 7);
    assert!(
        close(batch.env_reward_scale, 8.0),
        "{}",
        batch.env_reward_scale
    );
    let want = [0.2 * 8.0, -0.2 * 8.0, -0.3 * 8.0, 0.3 * 8.0];
    let got = advantages_of(&batch.samples, Role::Designer);
    assert_eq!(got.len(), 4);
    for (g, w) in got.iter().zip(want) {
        assert!(close(*g, w), "{got:?} vs {want:?}");
    }
    assert_eq!(batch.designer_advantages.len(), 4);
    // Each designer sample is its own group, trained on its first attempt only.
    let groups: Vec<&Group> = batch
        .samples
        .iter()
        .filter(|t| t.role == Role::Designer)
        .map(|t| &t.group)
        .collect();
    assert_eq!(
        groups,
        vec![
            &Group::Design(0),
            &Group::Design(1),
            &Group::Design(2),
            &Group::Design(3)
        ]
    );
    assert_eq!(batch.count(Role::Repair), 0);
    let first = &batch.samples[0].sample;
    assert_eq!(
        (first.prompt.clone(), first.completion.clone()),
        (vec![1, 2], vec![3, 4, 5])
    );
}

#[test]
fn a_design_alone_in_its_skill_gets_zero_and_the_scale_is_capped_at_50() {
    // One design per skill: each is its skill's mean, so centring leaves 0 (the reference's
    // rule); 100 episodes / 2 designs * 4 = 200, capped at 50.
    let designs = vec![design("A", 0.9), design("B", 0.0)];
    let episodes: Vec<Episode> = (0..100).map(|_| episode("g", false, 0.0, 1)).collect();
    let batch = credit::assign(&designs, &episodes, &cfg(), &mut Baselines::default(), 1);
    assert!(close(batch.env_reward_scale, 50.0));
    assert_eq!(batch.designer_advantages, vec![0.0, 0.0]);
    assert_eq!(credit::env_reward_scale(3, 0, 4, 50.0), 0.0);
    assert!(close(credit::env_reward_scale(3, 2, 4, 50.0), 6.0));
}

#[test]
fn an_invalid_design_is_never_in_a_batch_and_a_repaired_first_attempt_gets_raw_reward_0() {
    // Skill A: a first-attempt design whose env scored 1.0, a design saved by a repair whose
    // env scored 0.8, and one that never validated (its 5.0 must never be read).
    let designs = vec![
        design_of(0, "A", Validity::FirstAttempt, 1.0),
        design_of(0, "A", Validity::Repaired, 0.8),
        design_of(0, "A", Validity::Invalid, 5.0),
    ];
    // 4 no-hint episodes / 2 trained designs * regen 4 = 8 (the invalid one does not count:
    // with it, 4 / 3 * 4 = 5.33).
    let episodes: Vec<Episode> = (0..4).map(|_| episode("g", false, 0.0, 1)).collect();
    let batch = credit::assign(&designs, &episodes, &cfg(), &mut Baselines::default(), 1);
    assert!(
        close(batch.env_reward_scale, 8.0),
        "{}",
        batch.env_reward_scale
    );
    // Raw rewards 1.0 and 0 (repaired), mean 0.5: advantages (1 - 0.5) * 8 = 4, -4.
    assert_eq!(batch.designer_rewards, vec![1.0, 0.0]);
    assert_eq!(batch.designer_advantages, vec![4.0, -4.0]);
    assert_eq!(
        (batch.invalid_dropped, batch.repaired_first_attempts),
        (1, 1)
    );
    let groups: Vec<&Group> = batch
        .samples
        .iter()
        .filter(|t| t.role != Role::Agent)
        .map(|t| &t.group)
        .collect();
    assert_eq!(groups, vec![&Group::Design(0), &Group::Design(1)]);
    // An invalid design alone is never trained, whatever the scale.
    let only_invalid = [design_of(0, "A", Validity::Invalid, 5.0)];
    let c = CreditConfig {
        env_reward_scale: Some(3.0),
        ..cfg()
    };
    let batch = credit::assign(&only_invalid, &[], &c, &mut Baselines::default(), 1);
    assert!(batch.samples.is_empty());
    assert_eq!(batch.invalid_dropped, 1);
    // Off: the repaired first attempt keeps its env's 0.8 (mean 0.9: +0.1, -0.1 at scale 1).
    let c = CreditConfig {
        zero_repaired_first_attempts: false,
        env_reward_scale: Some(1.0),
        ..cfg()
    };
    let batch = credit::assign(&designs, &[], &c, &mut Baselines::default(), 1);
    assert_eq!(batch.designer_rewards, vec![1.0, 0.8]);
    assert!(close(batch.designer_advantages[0], 0.1));
    assert!(close(batch.designer_advantages[1], -0.1));
    // Asked for: invalid designs train with the given reward, 1, 0, -1 around mean 0.
    let c = CreditConfig {
        invalid_design_reward: Some(-1.0),
        env_reward_scale: Some(1.0),
        ..cfg()
    };
    let batch = credit::assign(&designs, &[], &c, &mut Baselines::default(), 1);
    assert_eq!(batch.designer_advantages, vec![1.0, 0.0, -1.0]);
    assert_eq!((batch.count(Role::Designer), batch.invalid_dropped), (3, 0));
}

#[test]
fn designs_are_centred_within_their_own_rollout_and_skill() {
    // Released together at one update: two of rollout 0 skill A (1.0, 0.0: +0.5, -0.5) and
    // one of rollout 1 skill A, alone in its group: 0, whatever its reward.
    let designs = vec![
        design_of(0, "A", Validity::FirstAttempt, 1.0),
        design_of(0, "A", Validity::FirstAttempt, 0.0),
        design_of(1, "A", Validity::FirstAttempt, 0.9),
    ];
    let c = CreditConfig {
        env_reward_scale: Some(1.0),
        ..cfg()
    };
    let batch = credit::assign(&designs, &[], &c, &mut Baselines::default(), 1);
    assert_eq!(batch.designer_advantages, vec![0.5, -0.5, 0.0]);
    assert_eq!(batch.designer_trained_from, vec![0, 0, 1]);
}

#[test]
fn repairs_train_only_when_asked() {
    let designs = vec![design("A", 1.0), design("A", 0.0)];
    let batch = credit::assign(&designs, &[], &cfg(), &mut Baselines::default(), 1);
    assert_eq!(batch.count(Role::Repair), 0);
    // 0 episodes give scale 0, so both advantages are 0 here.
    assert_eq!(batch.designer_advantages, vec![0.0, 0.0]);
    let with_repairs = CreditConfig {
        train_repairs: true,
        env_reward_scale: Some(2.0),
        ..cfg()
    };
    let batch = credit::assign(&designs, &[], &with_repairs, &mut Baselines::default(), 1);
    // (1 - 0.5) * 2 = 1 and (0 - 0.5) * 2 = -1; each repair shares its design's advantage
    // and group.
    assert_eq!(batch.count(Role::Designer), 2);
    assert_eq!(batch.count(Role::Repair), 2);
    let repairs: Vec<(f64, &Group)> = batch
        .samples
        .iter()
        .filter(|t| t.role == Role::Repair)
        .map(|t| (t.sample.advantage, &t.group))
        .collect();
    assert_eq!(
        repairs,
        vec![(1.0, &Group::Design(0)), (-1.0, &Group::Design(1))]
    );
}

#[test]
fn hint_plays_are_never_in_the_batch_unless_asked() {
    let episodes = vec![
        episode("g", false, 1.0, 1),
        episode("g", false, 0.0, 1),
        episode("g", true, 1.0, 1),
        episode("g", true, 1.0, 1),
    ];
    let first_mean = CreditConfig {
        ema_start: EmaStart::FirstMean,
        ..cfg()
    };
    let batch = credit::assign(&[], &episodes, &first_mean, &mut Baselines::default(), 1);
    assert_eq!(batch.count(Role::Agent), 2);
    assert_eq!(batch.hint_count(), 0);
    assert!(batch.samples.iter().all(|t| !t.hint));
    // The no-hint group's baseline is its own mean 0.5: the hint plays' 1.0s do not lower
    // the no-hint advantages.
    assert_eq!(advantages_of(&batch.samples, Role::Agent), vec![0.5, -0.5]);
    let asked = CreditConfig {
        train_hint_plays: true,
        ..first_mean
    };
    let batch = credit::assign(&[], &episodes, &asked, &mut Baselines::default(), 1);
    assert_eq!(batch.hint_count(), 2);
    // Their own group: both returned 1, so both advantages are 0.
    let hinted: Vec<f64> = batch
        .samples
        .iter()
        .filter(|t| t.hint)
        .map(|t| t.sample.advantage)
        .collect();
    assert_eq!(hinted, vec![0.0, 0.0]);
}

#[test]
fn a_one_turn_win_and_a_25_turn_loss_get_advantages_of_equal_magnitude_per_episode() {
    let episodes = vec![episode("g", false, 1.0, 1), episode("g", false, 0.0, 25)];
    for (baseline, magnitude) in [(AgentBaseline::Zscore, 1.0), (AgentBaseline::Ema, 0.5)] {
        // z-score: mean 0.5, std 0.5 -> +1 and -1 (up to the 1e-6 in the denominator);
        // EMA started at the first mean: baseline 0.5 -> +0.5 and -0.5.
        let c = CreditConfig {
            agent_baseline: baseline,
            ema_start: EmaStart::FirstMean,
            ..cfg()
        };
        let batch = credit::assign(&[], &episodes, &c, &mut Baselines::default(), 1);
        // Each episode trains as one sequence: its turns chain exactly.
        assert_eq!(batch.samples.len(), 2, "{baseline:?}");
        let (win, loss) = (&batch.samples[0].sample, &batch.samples[1].sample);
        assert!(
            (win.advantage - magnitude).abs() < 1e-5,
            "{baseline:?} {}",
            win.advantage
        );
        assert!(
            (loss.advantage + magnitude).abs() < 1e-5,
            "{baseline:?} {}",
            loss.advantage
        );
        assert_eq!(win.spans.len(), 1);
        assert_eq!(loss.spans.len(), 25);
        assert_eq!(loss.trained_tokens(), 50);
    }
}

#[test]
fn the_ema_baseline_starts_at_zero_and_carries_over_rollouts_per_game() {
    let mut b = Baselines::default();
    let c = cfg();
    // Rollout 1: returns 1, 0; the reference's EMA starts at 0, so advantages 1 - 0 = 1 and
    // 0 - 0 = 0; then b = 0.5 * 0 + 0.5 * 0.5 = 0.25.
    let first = [episode("g", false, 1.0, 1), episode("g", false, 0.0, 1)];
    let batch = credit::assign(&[], &first, &c, &mut b, 1);
    assert_eq!(advantages_of(&batch.samples, Role::Agent), vec![1.0, 0.0]);
    assert_eq!(b.games["g"], 0.25);
    // Rollout 2: returns 1, 1 -> advantages 1 - 0.25 = 0.75 each; then
    // b = 0.5 * 0.25 + 0.5 * 1 = 0.625.
    let second = [episode("g", false, 1.0, 1), episode("g", false, 1.0, 1)];
    let batch = credit::assign(&[], &second, &c, &mut b, 1);
    assert_eq!(advantages_of(&batch.samples, Role::Agent), vec![0.75, 0.75]);
    assert_eq!(b.games["g"], 0.625);
    // Started at the first mean: rollout 1 is centred (b = 0.5, stays 0.5), rollout 2 gives
    // 1 - 0.5 = 0.5 each and b = 0.75.
    let mut f = Baselines::default();
    let fc = CreditConfig {
        ema_start: EmaStart::FirstMean,
        ..cfg()
    };
    let batch = credit::assign(&[], &first, &fc, &mut f, 1);
    assert_eq!(advantages_of(&batch.samples, Role::Agent), vec![0.5, -0.5]);
    assert_eq!(f.games["g"], 0.5);
    let batch = credit::assign(&[], &second, &fc, &mut f, 1);
    assert_eq!(advantages_of(&batch.samples, Role::Agent), vec![0.5, 0.5]);
    assert_eq!(f.games["g"], 0.75);
    // z-score on the same returns: a constant group gets 0, and no EMA is kept.
    let mut z = Baselines::default();
    let zc = CreditConfig {
        agent_baseline: AgentBaseline::Zscore,
        ..cfg()
    };
    let batch = credit::assign(&[], &second, &zc, &mut z, 1);
    assert_eq!(advantages_of(&batch.samples, Role::Agent), vec![0.0, 0.0]);
    assert!(z.games.is_empty());
}

#[test]
fn an_episode_trains_on_exact_contexts_only() {
    // Turns 0 and 1 chain; turn 2's prompt was cut in the middle (it does not start with
    // turn 1's context), so it starts a second sequence with its own prompt.
    let mut e = episode("g", false, 1.0, 2);
    e.turns.push(sampled(vec![100, 999, 5], vec![7, 8]));
    let seqs = credit::episode_sequences(&e.turns, 0.25, 0);
    assert_eq!(seqs.len(), 2);
    // Sequence 1: prompt [100, 101]; then completion [10, 11], observation 200, completion
    // [11, 12]: trained spans 0..2 and 3..5.
    assert_eq!(seqs[0].prompt, vec![100, 101]);
    assert_eq!(seqs[0].completion, vec![10, 11, 200, 11, 12]);
    assert_eq!(seqs[0].spans, vec![0..2, 3..5]);
    assert_eq!(seqs[0].old_logprobs, vec![-0.1, -0.11, -0.11, -0.12]);
    assert_eq!(seqs[1].prompt, vec![100, 999, 5]);
    assert_eq!(seqs[1].spans, vec![0..2]);
    assert!(seqs.iter().all(|s| s.advantage == 0.25));
    let other = episode("g", false, 0.0, 1);
    let batch = credit::assign(
        &[],
        &[e.clone(), other],
        &cfg(),
        &mut Baselines::default(),
        1,
    );
    assert_eq!(batch.split_episodes, 1);
    assert_eq!(batch.count(Role::Agent), 3);
    // A cap of 8 tokens: turn 0 (2 + 2 = 4) fits, turn 1 (prompt 5 + 2 = 7) fits, a third
    // chained turn (prompt 8 + 2 = 10) would not: the sequence ends after turn 1, and its
    // head is intact.
    let e3 = episode("g", false, 1.0, 3);
    let capped = credit::episode_sequences(&e3.turns, 1.0, 8);
    assert_eq!(capped.len(), 1);
    assert_eq!(capped[0].prompt, vec![100, 101]);
    assert_eq!(capped[0].spans, vec![0..2, 3..5]);
    // A first turn longer than the cap is still kept (whole): nothing is ever cut inside.
    let tiny = credit::episode_sequences(&e3.turns, 1.0, 3);
    assert_eq!(tiny.len(), 1);
    assert_eq!(tiny[0].spans, vec![0..2]);
}

fn trained(role: Role, group: Group, adv: f64) -> Trained {
    Trained {
        role,
        group,
        hint: false,
        sample: GrpoSample::new(vec![1], vec![2], vec![-1.0], adv),
    }
}

#[test]
fn subsampling_keeps_whole_groups_and_gives_the_designer_its_own_budget() {
    let game = |g: &str| Group::Game {
        env: g.into(),
        hint: false,
    };
    // Three games of two sequences each, budget 4: exactly two whole games survive.
    let items: Vec<Trained> = ["a", "a", "b", "b", "c", "c"]
        .iter()
        .map(|g| trained(Role::Agent, game(g), 1.0))
        .collect();
    for seed in 0..20 {
        let kept = credit::subsample(items.clone(), 4, seed);
        assert_eq!(kept.len(), 4, "seed {seed}");
        let mut groups: Vec<&Group> = kept.iter().map(|t| &t.group).collect();
        groups.dedup();
        assert_eq!(groups.len(), 2, "seed {seed}: {groups:?}");
    }
    // One group larger than the budget: a subset of it, so the role still trains.
    let big: Vec<Trained> = (0..5)
        .map(|_| trained(Role::Agent, game("a"), 1.0))
        .collect();
    assert_eq!(credit::subsample(big, 3, 1).len(), 3);
    // In a full assignment, 30 agent sequences never crowd out the designer.
    let designs = vec![design("A", 1.0), design("A", 0.0)];
    let episodes: Vec<Episode> = (0..30)
        .map(|i| episode(&format!("g{}", i % 3), false, f64::from(i % 2), 1))
        .collect();
    let c = CreditConfig {
        max_agent_samples: 4,
        max_designer_samples: 1,
        ..cfg()
    };
    let batch = credit::assign(&designs, &episodes, &c, &mut Baselines::default(), 3);
    assert_eq!(batch.count(Role::Designer), 1);
    assert!(batch.count(Role::Agent) <= 4 && batch.count(Role::Agent) > 0);
}

#[test]
fn zero_advantage_fraction_counts_sequences_that_move_nothing() {
    let episodes = vec![
        episode("same", false, 1.0, 1),
        episode("same", false, 1.0, 1),
        episode("mixed", false, 1.0, 1),
        episode("mixed", false, 0.0, 1),
    ];
    // EMA from 0: "same" gives 1, 1 and "mixed" 1, 0: one of four moves nothing.
    let batch = credit::assign(&[], &episodes, &cfg(), &mut Baselines::default(), 1);
    assert_eq!(batch.zero_advantage_fraction(), 0.25);
    // z-score: "same" is constant (0, 0), "mixed" is +-1: two of four.
    let z = CreditConfig {
        agent_baseline: AgentBaseline::Zscore,
        ..cfg()
    };
    let batch = credit::assign(&[], &episodes, &z, &mut Baselines::default(), 1);
    assert_eq!(batch.zero_advantage_fraction(), 0.5);
}

#[test]
fn the_learning_rate_warms_up_then_decays_to_its_floor() {
    let s = LrSchedule {
        base: 1.0,
        warmup_steps: 4,
        decay: DecayKind::Cosine,
        total_steps: 14,
        min_ratio: 0.1,
    };
    // Warmup: (k + 1) / 4.
    for (k, want) in [(0, 0.25), (1, 0.5), (2, 0.75), (3, 1.0)] {
        assert!(close(s.at(k), want), "step {k}: {}", s.at(k));
    }
    // Cosine over steps 4..14: halfway (step 9) is the mean of 1 and 0.1.
    assert!(close(s.at(4), 1.0));
    assert!(close(s.at(9), 0.55));
    assert!(close(s.at(14), 0.1));
    assert!(close(s.at(1000), 0.1));
    let linear = LrSchedule {
        decay: DecayKind::Linear,
        ..s
    };
    assert!(close(linear.at(9), 0.55));
    assert!(close(linear.at(6), 1.0 - 0.9 * 0.2));
    assert!(close(LrSchedule::constant(0.3).at(99), 0.3));
}
