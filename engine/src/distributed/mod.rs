//! Multi-GPU settings with LibreYOLO's semantics (reference section f): the global batch split
//! across ranks, the SyncBatchNorm advice, and the torchrun-style launch environment. The
//! collectives themselves are NCCL through Burn (not in this module); a multi-process launch
//! agrees on NCCL's identifier through [`rendezvous`].

pub mod rendezvous;

use std::collections::HashMap;

/// Each rank's batch for a global `batch` over `world` GPUs, or LibreYOLO's error with the
/// nearest valid values.
pub fn per_rank_batch(batch: usize, world: usize) -> Result<usize, String> {
    let world = world.max(1);
    if batch.is_multiple_of(world) {
        return Ok(batch / world);
    }
    let lower = batch / world * world;
    let higher = lower + world;
    let suggestion = if lower == 0 { format!("Use batch={higher}.") } else { format!("Use batch={lower} or batch={higher}.") };
    Err(format!(
        "batch={batch} is the global batch and must be divisible by world_size={world}: each rank trains at batch // world_size, \
         so this value would silently train at a different global batch than requested. {suggestion}"
    ))
}

/// LibreYOLO's warning when BatchNorm statistics stay per rank on a small shard.
pub fn sync_bn_warning(sync_bn: bool, batch: usize, world: usize) -> Option<String> {
    let per_rank = batch / world.max(1);
    (world > 1 && !sync_bn && per_rank < 16).then(|| {
        format!(
            "DDP per-rank batch is {per_rank} (global batch {batch} / world_size {world}) and sync_bn is disabled; BatchNorm running \
             statistics are computed per rank on this small shard, which can reduce accuracy versus single-GPU. Consider setting sync_bn=true."
        )
    })
}

/// A process started by a torchrun-style launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub rank: usize,
    pub local_rank: usize,
    pub world_size: usize,
    pub master_addr: String,
    pub master_port: u16,
}

/// The GPUs of a run: the launcher's ranks, or the devices this process drives.
pub fn world_size(launch: Option<&Launch>, local_devices: usize) -> usize {
    launch.map_or(local_devices, |l| l.world_size)
}

const VARS: [&str; 5] = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"];

/// The launch described by `env` (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
/// `None` when none is set, an error naming what is missing or malformed otherwise.
pub fn launch_from(env: &HashMap<String, String>) -> Result<Option<Launch>, String> {
    let set: Vec<&str> = VARS.iter().copied().filter(|v| env.contains_key(*v)).collect();
    if set.is_empty() {
        return Ok(None);
    }
    let missing: Vec<&str> = VARS.iter().copied().filter(|v| !env.contains_key(*v)).collect();
    if !missing.is_empty() {
        return Err(format!("a launcher set {} but not {}: a multi-process launch needs all of {}", set.join(", "), missing.join(", "), VARS.join(", ")));
    }
    let number = |k: &str| -> Result<usize, String> { env[k].trim().parse::<usize>().map_err(|_| format!("{k}={} is not a non-negative integer", env[k])) };
    let (rank, local_rank, world_size) = (number("RANK")?, number("LOCAL_RANK")?, number("WORLD_SIZE")?);
    if world_size == 0 || rank >= world_size {
        return Err(format!("RANK={rank} must be below WORLD_SIZE={world_size}"));
    }
    let master_port = env["MASTER_PORT"].trim().parse::<u16>().map_err(|_| format!("MASTER_PORT={} is not a port number", env["MASTER_PORT"]))?;
    Ok(Some(Launch { rank, local_rank, world_size, master_addr: env["MASTER_ADDR"].clone(), master_port }))
}

impl Launch {
    /// Why this launch cannot train here, if it cannot: every rank on one machine (each drives
    /// `cuda:LOCAL_RANK`, and NCCL's ranks follow the device order), one GPU per rank.
    pub fn check(&self, cuda_devices: usize) -> Result<(), String> {
        if self.rank != self.local_rank {
            return Err(format!(
                "RANK={} but LOCAL_RANK={}: multi-node launches are not supported; start every rank on one machine (--nnodes=1)",
                self.rank, self.local_rank
            ));
        }
        if self.world_size > cuda_devices {
            return Err(format!("WORLD_SIZE={} asks for one GPU per rank, but this machine has {cuda_devices} CUDA device(s)", self.world_size));
        }
        Ok(())
    }
}

/// NCCL, which every collective needs, or how to provide it.
pub fn require_nccl() -> Result<(), String> {
    if cubecl_cuda::nccl::nccl_available() {
        return Ok(());
    }
    Err("training on several GPUs needs NCCL, loadable as `libnccl.so`, and none was found. Install NCCL, or link the \
         `libnccl.so.2` of a pip or apt package: `mkdir -p ~/nccl && ln -s /usr/lib/x86_64-linux-gnu/libnccl.so.2 ~/nccl/libnccl.so` \
         and add that folder to LD_LIBRARY_PATH"
        .to_string())
}

/// The launch of this process, from its environment.
pub fn launch() -> Result<Option<Launch>, String> {
    launch_from(&std::env::vars().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_global_batch_must_split_evenly() {
        assert_eq!(per_rank_batch(16, 2), Ok(8));
        assert_eq!(
            per_rank_batch(15, 2).unwrap_err(),
            "batch=15 is the global batch and must be divisible by world_size=2: each rank trains at batch // world_size, so this \
             value would silently train at a different global batch than requested. Use batch=14 or batch=16."
        );
        assert!(per_rank_batch(3, 4).unwrap_err().ends_with("Use batch=4."));
    }

    #[test]
    fn sync_bn_advice_only_for_small_unsynced_shards() {
        assert!(sync_bn_warning(false, 16, 2).unwrap().starts_with("DDP per-rank batch is 8 (global batch 16 / world_size 2)"));
        assert_eq!(sync_bn_warning(true, 16, 2), None);
        assert_eq!(sync_bn_warning(false, 32, 2), None);
        assert_eq!(sync_bn_warning(false, 8, 1), None);
    }

    #[test]
    fn a_launch_runs_on_one_machine_with_a_gpu_per_rank() {
        let launch = |rank, local_rank, world_size| Launch { rank, local_rank, world_size, master_addr: "127.0.0.1".into(), master_port: 29500 };
        assert_eq!(launch(1, 1, 2).check(2), Ok(()));
        assert!(launch(2, 0, 4).check(8).unwrap_err().starts_with("RANK=2 but LOCAL_RANK=0: multi-node launches are not supported"));
        assert_eq!(launch(0, 0, 2).check(0).unwrap_err(), "WORLD_SIZE=2 asks for one GPU per rank, but this machine has 0 CUDA device(s)");
    }

    #[test]
    fn launcher_environment() {
        let env = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<HashMap<_, _>>();
        assert_eq!(launch_from(&env(&[])), Ok(None));
        let full = [("RANK", "1"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")];
        assert_eq!(launch_from(&env(&full)), Ok(Some(Launch { rank: 1, local_rank: 1, world_size: 2, master_addr: "127.0.0.1".into(), master_port: 29500 })));
        let err = launch_from(&env(&full[..3])).unwrap_err();
        assert!(err.contains("not MASTER_ADDR, MASTER_PORT"), "{err}");
        let mut bad = full;
        bad[0] = ("RANK", "2");
        assert_eq!(launch_from(&env(&bad)).unwrap_err(), "RANK=2 must be below WORLD_SIZE=2");
        bad[0] = ("RANK", "x");
        assert!(launch_from(&env(&bad)).unwrap_err().contains("RANK=x is not"));
    }
}
