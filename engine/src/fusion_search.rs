//! How widely burn-fusion searches an op sequence it has not seen before: its beam search's
//! number of blocks.
//!
//! burn-fusion explores every new op sequence once per process, splitting it into independent
//! blocks and trying to merge them; with upstream's 5 blocks that merging (recursive, cloning
//! each block's fusers) was most of a warm process's first step on the H200: YOLOv9-t, eager,
//! batch 16, bf16, `LIBREYOLO_HOST_PROFILE` put 2.9 s of the device thread in
//! `burn_fusion::search::merging` and the first step took 10.6-11.6 s. With 2 blocks the
//! merging cost 0.09 s and the first step 3.6 s, at the same step time (872 against 883 ms;
//! docs/history/2026-12.md, 2026-12-02 (bench/results/2026-12-02-h200-host-profile-fusion-search.json)). Captured training searches as narrowly (4 blocks
//! before the in-place state updates): one build and cache, alternating, its warm-up was
//! 3.9-4.7 s against 5.2-6.1 at 4 blocks (first step 1.0-1.2 against 2.1-2.4 s) for a replay
//! 1.3-1.7% slower, and the whole step then computes what eager does, bit for bit (2026-12-03 (bench/results/2026-12-03-h200-in-place-updates-merged.json)). Set before the first GPU tensor; a `burn.toml` in the working directory (or
//! above) is left to configure burn.

use burn::BurnConfig;
use cubecl_environment::config::RuntimeConfig;

/// Environment variable: the block count (1 = one block, no merging; 5 = upstream's default).
pub const ENV: &str = "LIBREYOLO_FUSION_MAX_BLOCKS";

/// Ours: the fewest blocks that still fuse across the two chains of a step that interleave (1
/// forced unrelated ops into one block: more kernels and a slower step).
pub const DEFAULT_MAX_BLOCKS: usize = 2;

/// The block count this process uses: `LIBREYOLO_FUSION_MAX_BLOCKS`, else ours.
pub fn max_blocks() -> Result<usize, String> {
    match std::env::var(ENV) {
        Ok(value) => parse(&value),
        Err(_) => Ok(DEFAULT_MAX_BLOCKS),
    }
}

fn parse(value: &str) -> Result<usize, String> {
    value
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("{ENV}={value:?}: expected a whole number of blocks, at least 1 (burn's default is 5)"))
}

/// burn's configuration with `max_blocks` set, the environment's overrides (`BURN_FUSION_LOG`,
/// ...) applied on top, as burn would have applied them to its own.
fn config(max_blocks: usize) -> BurnConfig {
    let text = format!("[fusion.beam_search]\nmax_blocks = {max_blocks}\n");
    let config: BurnConfig = toml::from_str(&text).expect("burn's fusion configuration keys");
    config.override_from_env()
}

/// Sets burn's fusion search unless burn's configuration was already set or read (the first
/// call of a process wins). The caller leaves it to a `burn.toml` when there is one.
pub fn configure() {
    // An invalid value was refused at start-up (cli::main); here it falls back to ours.
    BurnConfig::try_set(config(max_blocks().unwrap_or(DEFAULT_MAX_BLOCKS)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_the_beam_search_width_and_refuses_nonsense() {
        assert_eq!(config(2).fusion().beam_search.max_blocks, 2);
        assert_eq!(config(5).fusion().beam_search.max_blocks, 5);
        assert_eq!(parse(" 3 "), Ok(3));
        for bad in ["0", "-1", "two", ""] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(ENV) && err.contains("at least 1"), "{err}");
        }
    }
}
