//! How widely burn-fusion searches an op sequence it has not seen before: its beam search's
//! number of blocks.
//!
//! burn-fusion explores every new op sequence once per process, splitting it into independent
//! blocks and trying to merge them; with upstream's 5 blocks that merging (recursive, cloning
//! each block's fusers) was most of a warm process's first step on the H200: YOLOv9-t, eager,
//! batch 16, bf16, `LIBREYOLO_HOST_PROFILE` put 2.9 s of the device thread in
//! `burn_fusion::search::merging` and the first step took 10.6-11.6 s. With 2 blocks the
//! merging cost 0.09 s and the first step 3.6 s, at the same step time (872 against 883 ms;
//! docs/performance.md, fifteenth session). A captured step searches 4 blocks. Set before the
//! first GPU tensor; a `burn.toml` in the working directory (or above) is left to configure burn.

use burn::BurnConfig;
use cubecl_environment::config::RuntimeConfig;

/// Environment variable: the block count (1 = one block, no merging; 5 = upstream's default).
pub const ENV: &str = "LIBREYOLO_FUSION_MAX_BLOCKS";

/// Ours for eager work: the fewest blocks that still fuse across the two chains of a step that
/// interleave (1 forced unrelated ops into one block: more kernels and a slower step).
pub const DEFAULT_MAX_BLOCKS: usize = 2;

/// For captured training, whose GPU time the wider search lowers: the whole step's replay at 4
/// blocks is within 0.3% of upstream's 5 in the same calls (2 blocks: 1.2-1.6% slower; b16 bf16),
/// and its first step takes 2.1-3.0 s instead of 3.7-6.1 (the warm-up 6.3-8.1 against
/// 7.3-12.0 s; docs/performance.md, seventeenth session).
pub const CAPTURED_MAX_BLOCKS: usize = 4;

/// The block count this process uses: `LIBREYOLO_FUSION_MAX_BLOCKS`, else ours (for eager work
/// or for captured training).
pub fn max_blocks_for(captured: bool) -> Result<usize, String> {
    match std::env::var(ENV) {
        Ok(value) => parse(&value),
        Err(_) if captured => Ok(CAPTURED_MAX_BLOCKS),
        Err(_) => Ok(DEFAULT_MAX_BLOCKS),
    }
}

/// [`max_blocks_for`] an eager process.
pub fn max_blocks() -> Result<usize, String> {
    max_blocks_for(false)
}

fn parse(value: &str) -> Result<usize, String> {
    value.trim().parse::<usize>().ok().filter(|&n| n >= 1).ok_or_else(|| format!("{ENV}={value:?}: expected a whole number of blocks, at least 1 (burn's default is 5)"))
}

/// burn's configuration with `max_blocks` set, the environment's overrides (`BURN_FUSION_LOG`,
/// ...) applied on top, as burn would have applied them to its own.
fn config(max_blocks: usize) -> BurnConfig {
    let text = format!("[fusion.beam_search]\nmax_blocks = {max_blocks}\n");
    let config: BurnConfig = toml::from_str(&text).expect("burn's fusion configuration keys");
    config.override_from_env()
}

/// Sets burn's fusion search for an eager process (see [`configure_for`]).
pub fn configure() {
    configure_for(false)
}

/// Sets burn's fusion search unless a `burn.toml` does, or burn's configuration was already set
/// or read (the first call of a process wins).
pub fn configure_for(captured: bool) {
    if crate::kernel_cache::config_file_above(&["burn.toml", "Burn.toml"]) {
        return;
    }
    // An invalid value was refused at start-up (cli::main); here it falls back to ours.
    BurnConfig::try_set(config(max_blocks_for(captured).unwrap_or(DEFAULT_MAX_BLOCKS)));
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
