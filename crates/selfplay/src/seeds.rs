//! Seed derivation: every random choice of a run is a pure function of the master seed, the
//! rollout and a purpose tag, so a resumed run repeats an uninterrupted one exactly and no RNG
//! state needs saving beyond the rollout counter.

/// SplitMix64 of `seed` mixed with `salt`.
pub fn mix(seed: u64, salt: u64) -> u64 {
    let mut z = seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed for `tag` and `parts` under `seed`.
pub fn derive(seed: u64, tag: &str, parts: &[u64]) -> u64 {
    let mut s = seed;
    for b in tag.bytes() {
        s = mix(s, u64::from(b));
    }
    for &p in parts {
        s = mix(s, p);
    }
    s
}
