//! The CPU line of `bench-model`: the processor and the SIMD flags that choose its kernels,
//! so that every figure says what it ran on.

/// The CPU's model name (from `/proc/cpuinfo`, where there is one) and the flags spade's
/// kernels look for, each marked present (`+`) or absent (`-`).
pub fn describe() -> String {
    let name = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let flags: Vec<String> = flags()
        .into_iter()
        .map(|(f, on)| format!("{}{f}", if on { '+' } else { '-' }))
        .collect();
    format!("{name}; {}", flags.join(" "))
}

#[cfg(target_arch = "x86_64")]
fn flags() -> Vec<(&'static str, bool)> {
    vec![
        ("avx2", std::is_x86_feature_detected!("avx2")),
        ("fma", std::is_x86_feature_detected!("fma")),
        ("f16c", std::is_x86_feature_detected!("f16c")),
        ("avx512f", std::is_x86_feature_detected!("avx512f")),
        ("avx512bw", std::is_x86_feature_detected!("avx512bw")),
        ("avx512vl", std::is_x86_feature_detected!("avx512vl")),
        ("avx512vnni", std::is_x86_feature_detected!("avx512vnni")),
    ]
}

#[cfg(not(target_arch = "x86_64"))]
fn flags() -> Vec<(&'static str, bool)> {
    Vec::new()
}
