//! The designer's delay buffer and the reference preset, from hand-computed examples: the
//! samples of rollout K leave at K + 4 (or at the last rollout) with their reward recomputed
//! over every play of their environment in the window.
use spade_selfplay::TrainConfig;
use spade_selfplay::config::{DesignerReward, Preset};
use spade_selfplay::credit::{self, AgentBaseline, CreditConfig, Validity};
use spade_selfplay::delay::{self, DesignerBuffer, Held};
use spade_selfplay::policy::Sampled;

fn held(rollout: u64, skill: &str, env: Option<&str>, validity: Validity, regret: f64) -> Held {
    Held {
        rollout,
        skill: skill.into(),
        first: Sampled {
            prompt: vec![1, 2],
            tokens: vec![3, 4],
            logprobs: vec![-0.5, -0.5],
            text: String::new(),
        },
        repairs: Vec::new(),
        validity,
        env: env.map(str::to_string),
        regret,
    }
}

fn blend() -> TrainConfig {
    TrainConfig {
        designer_reward: DesignerReward::Blend,
        ..TrainConfig::default()
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn designs_of_rollout_k_leave_at_k_plus_4_with_the_reward_of_the_windows_plays() {
    let cfg = blend();
    assert_eq!(cfg.designer_delay, 4);
    let mut b = DesignerBuffer::default();
    // Rollout 0: a valid design (env e0, regret 0.15 measured now) and an invalid one.
    b.hold([
        held(0, "A", Some("e0"), Validity::FirstAttempt, 0.15),
        held(0, "A", None, Validity::Invalid, 0.0),
    ]);
    b.record("e0", &[0.0, 1.0], false);
    assert!(b.release(0, 4, false).is_empty());
    // Rollout 1: another design; e0 is played again.
    b.hold([held(1, "B", Some("e1"), Validity::FirstAttempt, 0.0)]);
    b.record("e0", &[1.0, 1.0], false);
    b.record("e1", &[0.0, 0.0], false);
    // An env no held sample made is not tracked.
    b.record("starter", &[1.0], false);
    assert!(b.release(1, 4, false).is_empty());
    // Rollouts 2 and 3: nothing leaves.
    b.record("e0", &[1.0, 1.0], false);
    assert!(b.release(2, 4, false).is_empty());
    assert!(b.release(3, 4, false).is_empty());
    assert_eq!(b.len(), 3);
    assert!(!b.plays.contains_key("starter"));
    // Rollout 4: rollout 0's two samples leave, rollout 1's stays.
    let out = b.release(4, 4, false);
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|r| r.held.rollout == 0));
    assert_eq!(out[0].plays.returns, vec![0.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    // Recomputed: e0's mean return over the window is 5/6, plateau(5/6) = 1 - (5/6 - 0.6) /
    // 0.25 = 1/15, so 0.6 / 15 + 0.4 * min(1, 0.15 / 0.15) = 0.04 + 0.4 = 0.44. (At design
    // time the mean was 0.5, on the plateau: 1.0.)
    assert!(close(delay::window_reward(&cfg.rewards(), &out[0]), 0.44));
    let designs = delay::designs(&cfg.rewards(), out);
    assert!(close(designs[0].reward, 0.44));
    assert_eq!(designs[1].validity, Validity::Invalid);
    // The invalid one is never trained.
    assert_eq!(
        credit::design_reward(&designs[1], &CreditConfig::default()),
        None
    );
    assert_eq!(b.len(), 1);
    assert_eq!(b.plays.keys().collect::<Vec<_>>(), vec!["e1"]);
    // Rollout 5: rollout 1's sample leaves; e1 never won, so plateau(0) = 0 and regret 0.
    let out = b.release(5, 4, false);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].held.rollout, 1);
    assert_eq!(delay::window_reward(&cfg.rewards(), &out[0]), 0.0);
    assert!(b.is_empty() && b.plays.is_empty());
}

#[test]
fn the_last_rollout_flushes_the_buffer() {
    let mut b = DesignerBuffer::default();
    b.hold([held(7, "A", Some("e7"), Validity::FirstAttempt, 0.5)]);
    b.hold([held(8, "A", Some("e8"), Validity::FirstAttempt, 0.5)]);
    assert!(b.release(8, 4, false).is_empty());
    let out = b.release(8, 4, true);
    assert_eq!(
        out.iter().map(|r| r.held.rollout).collect::<Vec<_>>(),
        vec![7, 8]
    );
    assert!(b.is_empty() && b.plays.is_empty());
    // The run's last rollout is the one that flushes; a run without an end never does.
    let cfg = TrainConfig {
        rollouts: 9,
        ..TrainConfig::default()
    };
    assert!(!cfg.is_last_rollout(7));
    assert!(cfg.is_last_rollout(8));
    assert!(!TrainConfig::default().is_last_rollout(1_000_000));
    // Delay 0 trains a rollout's samples in that rollout.
    b.hold([held(3, "A", None, Validity::Invalid, 0.0)]);
    assert_eq!(b.release(3, 0, false).len(), 1);
}

#[test]
fn a_timeout_anywhere_in_the_window_gives_the_timeout_reward() {
    let cfg = blend();
    let mut b = DesignerBuffer::default();
    b.hold([held(0, "A", Some("e0"), Validity::FirstAttempt, 0.15)]);
    b.record("e0", &[0.5, 0.5], false);
    b.record("e0", &[], true);
    let out = b.release(4, 4, false);
    assert!(out[0].plays.timed_out);
    assert_eq!(delay::window_reward(&cfg.rewards(), &out[0]), -0.5);
    // Regret mode: the regret of the design rollout.
    let mut b = DesignerBuffer::default();
    b.hold([held(0, "A", Some("e0"), Validity::FirstAttempt, 0.25)]);
    b.record("e0", &[0.0], false);
    let out = b.release(4, 4, false);
    assert_eq!(
        delay::window_reward(&TrainConfig::default().rewards(), &out[0]),
        0.25
    );
}

#[test]
fn the_buffer_survives_a_checkpoint_exactly() {
    let mut b = DesignerBuffer::default();
    b.hold([
        held(2, "A", Some("e2"), Validity::Repaired, 0.125),
        held(2, "B", None, Validity::Invalid, 0.0),
    ]);
    b.record("e2", &[1.0, -1.0, 0.0], true);
    let text = serde_json::to_string(&b).unwrap();
    let back: DesignerBuffer = serde_json::from_str(&text).unwrap();
    assert_eq!(back, b);
}

#[test]
fn the_reference_preset_sets_the_scripts_choices_and_keys_override_it() {
    let r = TrainConfig::parse("preset = \"reference\"\n", true).unwrap();
    assert_eq!(r, TrainConfig::reference());
    assert_eq!(r.preset, Some(Preset::Reference));
    assert_eq!(r.agent_baseline, AgentBaseline::Zscore);
    assert_eq!(r.designer_reward, DesignerReward::Blend);
    assert_eq!((r.clip_eps, r.clip_eps_high), (0.2, Some(0.28)));
    assert_eq!((r.adam_beta2, r.weight_decay), (0.98, 0.1));
    assert_eq!(r.lr, 1e-6);
    assert_eq!(r.lora_rank, 32);
    assert_eq!(
        (
            r.temperature_of(spade_selfplay::Role::Designer),
            r.temperature_of(spade_selfplay::Role::Repair),
            r.temperature_of(spade_selfplay::Role::Agent),
            r.temperature_of(spade_selfplay::Role::Hint)
        ),
        (0.6, 0.6, 0.6, 0.3)
    );
    assert_eq!((r.designs_per_round, r.designer_group), (24, 1));
    assert_eq!((r.plays_per_game, r.hint_plays), (16, 16));
    // The method itself is the same in both.
    let d = TrainConfig::default();
    assert_eq!(
        (r.designer_delay, r.tis_clamp, r.failed_play_return),
        (d.designer_delay, d.tis_clamp, d.failed_play_return)
    );
    // A key beside the preset overrides it, in TOML and JSON alike.
    let t = TrainConfig::parse(
        "preset = \"reference\"\nlr = 2e-6\nplays_per_game = 4\n",
        true,
    )
    .unwrap();
    assert_eq!((t.lr, t.plays_per_game, t.hint_plays), (2e-6, 4, 16));
    let j = TrainConfig::parse("{\"preset\": \"reference\", \"lr\": 2e-6}", false).unwrap();
    assert_eq!((j.lr, j.agent_baseline), (2e-6, AgentBaseline::Zscore));
    // The written config.json reads back as the same settings.
    assert_eq!(TrainConfig::parse(&t.to_json(), false).unwrap(), t);
    // Without a preset, the temperature is shared.
    assert_eq!(d.temperature_of(spade_selfplay::Role::Hint), d.temperature);
}

#[test]
fn bad_presets_and_retired_keys_are_refused_with_the_way_forward() {
    let err = TrainConfig::parse("preset = \"paper\"\n", true).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("preset") && msg.contains("\"reference\""),
        "{msg}"
    );
    let err = TrainConfig::parse("designer_start_rollout = 4\n", true).unwrap_err();
    assert!(err.to_string().contains("designer_delay"), "{err}");
    let err = TrainConfig::parse(
        "max_update_samples = 3\nmax_agent_update_samples = 4\n",
        true,
    )
    .unwrap_err();
    assert!(err.to_string().contains("both"), "{err}");
    let old = TrainConfig::parse("max_update_samples = 3\n", true).unwrap();
    assert_eq!(old.max_agent_update_samples, 3);
    let err = TrainConfig::parse("[1, 2]", false).unwrap_err();
    assert!(err.to_string().contains("table of settings"), "{err}");
    for (text, field) in [
        ("tis_clamp = -1.0", "tis_clamp"),
        ("adam_beta2 = 1.0", "adam_beta2"),
        ("failed_play_return = -2.0", "failed_play_return"),
        ("hint_temperature = -0.1", "hint_temperature"),
        ("clip_eps_high = -0.1", "clip_eps_high"),
        ("weight_decay = -0.1", "weight_decay"),
    ] {
        let err = TrainConfig::parse(text, true).unwrap_err();
        assert!(err.to_string().contains(field), "{text}: {err}");
    }
    let err = TrainConfig::parse("loss_aggregation = \"median\"\n", true).unwrap_err();
    assert!(err.to_string().contains("sample_mean"), "{err}");
}
