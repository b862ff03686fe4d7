//! Which convolution kernels autotune chooses among (libreyolo-run patch; see vendor/README.md).
//!
//! Upstream benchmarks every candidate for every new shape. On a cold cache that is the whole
//! warm-up: each implicit-GEMM variant is compiled with NVRTC before it can be timed, and the
//! im2col candidates run a matmul that is itself autotuned over about twenty matmul kernels
//! (measured on an H200: 23 nested matmul tunings took 298 s of a 430 s YOLOv9-t warm-up, the
//! 48 convolution tunings around them 116 s). `BURN_CONV_KERNELS` narrows the choice:
//!
//! * `all` (the default, upstream's behaviour): every candidate is benchmarked.
//! * `gemm`: only the implicit-GEMM (and depthwise) candidates are benchmarked; direct,
//!   fallback and im2col kernels run only for a shape every one of those declines.
//! * `fixed` or `fixed:NAME,NAME,...`: nothing is benchmarked. The first candidate that
//!   accepts the shape runs: the named ones in the order given, then each direction's own
//!   preference (measured on the H200, see the call sites), then the other primary
//!   candidates, then the fallbacks, each group in upstream's order. One kernel is compiled
//!   per configuration instead of one per candidate.
//!
//! Under `gemm` and `fixed` the matmul inside an im2col candidate is launched with the
//! matmul's own heuristic choice instead of being autotuned in turn.
//!
//! An unreadable value is reported once on stderr and read as `all`.

use std::sync::{Arc, OnceLock};

use cubecl::tune::{InputGenerator, KeyGenerator, TunableSet, Tunable, TuneGroup};

use crate::{CubeAutotuneKey, kernel::matmul::MatmulStrategy, tensor::CubeTensor};

/// The environment variable read once, at the first convolution.
pub const ENV: &str = "BURN_CONV_KERNELS";

/// How a candidate is treated by the narrowed policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// Implicit GEMM (and depthwise): compiled per tile configuration, no nested tuning.
    Primary,
    /// Direct, fallback and im2col kernels: slow, or a matmul with its own autotune.
    Fallback,
}

/// The selection policy (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Benchmark every candidate (upstream).
    All,
    /// Benchmark the implicit-GEMM candidates; the others only when all of those decline.
    Gemm,
    /// Benchmark nothing: the first candidate that accepts, preferred names first.
    Fixed(Vec<String>),
}

impl Policy {
    /// Reads a policy from the text of `BURN_CONV_KERNELS`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim() {
            "" | "all" => Ok(Self::All),
            "gemm" => Ok(Self::Gemm),
            "fixed" => Ok(Self::Fixed(Vec::new())),
            other => match other.strip_prefix("fixed:") {
                Some(names) => Ok(Self::Fixed(
                    names.split(',').map(str::trim).filter(|n| !n.is_empty()).map(String::from).collect(),
                )),
                None => Err(format!(
                    "{ENV}={other:?} is not one of `all`, `gemm`, `fixed`, `fixed:NAME,...`"
                )),
            },
        }
    }
}

/// The process-wide policy, read from the environment once.
pub fn policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| {
        let text = std::env::var(ENV).unwrap_or_default();
        Policy::parse(&text).unwrap_or_else(|err| {
            eprintln!("warning: {err}; benchmarking every convolution kernel");
            Policy::All
        })
    })
}

/// The matmul strategy of the im2col candidates: autotuned under `all` (upstream), the
/// matmul's heuristic choice under the narrowed policies (a nested autotune cost ~13 s per
/// shape on the H200).
pub(crate) fn nested_matmul() -> MatmulStrategy {
    match policy() {
        Policy::All => MatmulStrategy::default(),
        Policy::Gemm | Policy::Fixed(_) => MatmulStrategy::Cube,
    }
}

type Run<I> = Arc<dyn Fn(I) -> Result<CubeTensor, String> + Send + Sync>;

/// One convolution kernel a tuner may choose.
pub(crate) struct Candidate<I> {
    name: &'static str,
    role: Role,
    run: Run<I>,
}

/// A candidate from upstream's name and closure.
pub(crate) fn candidate<I, E: Into<String>>(
    name: &'static str,
    role: Role,
    run: impl Fn(I) -> Result<CubeTensor, E> + Send + Sync + 'static,
) -> Candidate<I> {
    Candidate {
        name,
        role,
        run: Arc::new(move |inputs| run(inputs).map_err(Into::into)),
    }
}

/// The candidates in the order the fixed policy tries them: `named` (the user's), then
/// `preferred` (the call site's), then primary, then fallback candidates.
fn fixed_order<I>(candidates: Vec<Candidate<I>>, named: &[String], preferred: &[&str]) -> Vec<Candidate<I>> {
    let mut rest: Vec<Option<Candidate<I>>> = candidates.into_iter().map(Some).collect();
    let mut order = Vec::with_capacity(rest.len());
    for name in named.iter().map(String::as_str).chain(preferred.iter().copied()) {
        if let Some(slot) = rest.iter_mut().find(|c| c.as_ref().is_some_and(|c| c.name == name)) {
            order.push(slot.take().expect("found above"));
        }
    }
    for role in [Role::Primary, Role::Fallback] {
        for slot in rest.iter_mut() {
            if slot.as_ref().is_some_and(|c| c.role == role) {
                order.push(slot.take().expect("checked above"));
            }
        }
    }
    order
}

/// The tunable set for `candidates` under the process-wide [`policy`]; `preferred` is the order
/// the `fixed` policy tries first.
pub(crate) fn tunable_set<I: Clone + Send + Sync + 'static>(
    key_gen: impl KeyGenerator<CubeAutotuneKey, I>,
    input_gen: impl InputGenerator<CubeAutotuneKey, I>,
    preferred: &[&str],
    candidates: Vec<Candidate<I>>,
) -> TunableSet<CubeAutotuneKey, I, CubeTensor> {
    let mut set = TunableSet::new(key_gen, input_gen);
    match policy() {
        Policy::All => {
            for c in candidates {
                set = set.with(Tunable::new(c.name, move |inputs: I| (c.run)(inputs)));
            }
        }
        Policy::Gemm => {
            // One cutoff group: the primary candidates are the round, the fallbacks the level
            // under it, reached only when every primary candidate declines the shape.
            let group = TuneGroup::new("conv_kernels", |_| 1);
            for c in candidates {
                let level = if c.role == Role::Primary { 1 } else { 0 };
                set = set.with(Tunable::new(c.name, move |inputs: I| (c.run)(inputs)).group(&group, move |_| level));
            }
        }
        Policy::Fixed(named) => {
            // A single tunable: the tuner runs it without benchmarking anything.
            let chain = fixed_order(candidates, named, preferred);
            let name = format!("first_of[{}]", chain.iter().map(|c| c.name).collect::<Vec<_>>().join(","));
            set = set.with(Tunable::new(&name, move |inputs: I| {
                let mut declined = Vec::new();
                for c in &chain {
                    match (c.run)(inputs.clone()) {
                        Ok(out) => return Ok(out),
                        Err(err) => declined.push(format!("{}: {err}", c.name)),
                    }
                }
                Err(format!("every convolution kernel declined: {}", declined.join("; ")))
            }));
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_policy_and_rejects_the_rest() {
        assert_eq!(Policy::parse("").unwrap(), Policy::All);
        assert_eq!(Policy::parse("gemm").unwrap(), Policy::Gemm);
        assert_eq!(Policy::parse("fixed").unwrap(), Policy::Fixed(vec![]));
        assert_eq!(
            Policy::parse("fixed: simple_tma_mma ,simple_sync_cmma").unwrap(),
            Policy::Fixed(vec!["simple_tma_mma".into(), "simple_sync_cmma".into()])
        );
        assert!(Policy::parse("fastest").unwrap_err().contains(ENV));
    }

    #[test]
    fn fixed_order_puts_named_then_primary_then_fallback() {
        let c = |name, role| candidate::<u8, String>(name, role, |_| Err("unused".into()));
        let order = fixed_order(
            vec![
                c("direct", Role::Fallback),
                c("a", Role::Primary),
                c("im2col", Role::Fallback),
                c("b", Role::Primary),
            ],
            &["b".into(), "missing".into()],
            &["im2col"],
        );
        let names: Vec<_> = order.iter().map(|c| c.name).collect();
        assert_eq!(names, ["b", "im2col", "a", "direct"]);
    }
}
