//! The devices a run's evaluations go to: one worker per device (`--devices`, docs/parallel.md).
//!
//! A device is what one worker holds alone while it times: the whole machine (the default, one worker),
//! a set of CPU cores the worker and everything it starts are pinned to (the `cpu` target), or one GPU
//! the worker alone sees (`CUDA_VISIBLE_DEVICES`, `mlx-cuda`). Two evaluations never time on one device
//! at once: the runner gives each worker one evaluation at a time.

use crate::target::Target;
use serde::{Deserialize, Serialize};

/// One worker's device. The default (no cores, no GPU) is the machine as the worker finds it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    /// CPU cores the worker is pinned to (by index, as the OS numbers them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<Vec<usize>>,
    /// The GPU the worker alone sees, by the index CUDA gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// A Ray actor on the cluster at this address holds the device (`--cluster`), one GPU or one CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray: Option<String>,
}

impl Device {
    /// How people read it: `cores 0-3`, `gpu 1`, `default`.
    pub fn label(&self) -> String {
        if let Some(address) = &self.ray {
            return format!("ray actor at {address}");
        }
        match (&self.cores, self.gpu) {
            (_, Some(g)) => format!("gpu {g}"),
            (Some(c), None) => format!("cores {}", ranges(c)),
            (None, None) => "default".to_string(),
        }
    }
}

/// `0,1,2,5` → `0-2,5`.
fn ranges(cores: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cores.len() {
        let mut j = i;
        while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cores[i].to_string()
        } else {
            format!("{}-{}", cores[i], cores[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// The devices `--devices SPEC` names for `target`; `cores` are the CPU cores this process may run on.
///
/// - `cpu`: `N`, a number of workers, each pinned to its own share of `cores` (contiguous, as even as
///   the count allows). `1` is one worker on every core, as without the flag.
/// - `mlx-cuda`: `N` (GPUs 0 to N-1) or a list of GPU indices, `0,2`.
/// - `mlx-metal`: `1` only (a Mac has one GPU).
pub fn parse(spec: &str, target: Target, cores: &[usize]) -> Result<Vec<Device>, String> {
    let spec = spec.trim();
    let list: Vec<&str> = spec.split(',').map(str::trim).collect();
    let numbers: Vec<u32> = list
        .iter()
        .map(|s| s.parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| {
            format!(
                "--devices {spec}: expected a number of devices (`2`) or, for GPUs, their indices (`0,2`)"
            )
        })?;
    let count = (list.len() == 1).then_some(numbers[0]);
    match target {
        Target::Cpu => {
            let n = count.ok_or_else(|| {
                format!(
                    "--devices {spec}: on the cpu target give a number of workers (each pinned to its own \
                     cores), e.g. `--devices 2`"
                )
            })? as usize;
            if n == 0 || n > cores.len() {
                return Err(format!(
                    "--devices {n}: this process may run on {} core(s) ({}); give 1 to {} workers",
                    cores.len(),
                    ranges(cores),
                    cores.len()
                ));
            }
            if n == 1 {
                return Ok(vec![Device::default()]);
            }
            // Equal contiguous shares (cores left over stay unused): workers whose times are compared
            // get the same resources.
            let each = cores.len() / n;
            Ok((0..n)
                .map(|i| Device {
                    cores: Some(cores[i * each..(i + 1) * each].to_vec()),
                    ..Device::default()
                })
                .collect())
        }
        Target::MlxCuda | Target::Cuda => {
            let gpus: Vec<u32> = match count {
                Some(0) => return Err("--devices 0: give at least one GPU".to_string()),
                Some(n) => (0..n).collect(),
                None => numbers,
            };
            let mut seen = gpus.clone();
            seen.sort_unstable();
            seen.dedup();
            if seen.len() != gpus.len() {
                return Err(format!(
                    "--devices {spec}: a GPU named twice (two workers would time on one GPU at once)"
                ));
            }
            Ok(gpus
                .into_iter()
                .map(|g| Device {
                    gpu: Some(g),
                    ..Device::default()
                })
                .collect())
        }
        Target::MlxMetal => match count {
            Some(1) => Ok(vec![Device::default()]),
            _ => Err(format!(
                "--devices {spec}: a Mac has one GPU, so mlx-metal runs one worker; drop --devices"
            )),
        },
    }
}

/// The devices of `--cluster ADDRESS`: `--devices N` (a number; 1 without the flag) Ray actors, each
/// holding one GPU (`num_gpus=1`) or, on the cpu target, one CPU. The cluster picks the nodes.
pub fn on_cluster(
    address: &str,
    devices: Option<&str>,
    target: Target,
) -> Result<Vec<Device>, String> {
    let address = address.trim();
    let ok = address == "auto"
        || address
            .strip_prefix("ray://")
            .unwrap_or(address)
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if !ok {
        return Err(format!(
            "--cluster {address}: expected ray://HOST:PORT (Ray's client server), HOST:PORT (the head's \
             address) or auto (the Ray cluster running on this machine)"
        ));
    }
    if target == Target::MlxMetal {
        return Err(
            "--cluster: mlx-metal runs on the Mac ksearch runs on; a cluster of Macs is not supported yet"
                .to_string(),
        );
    }
    let n = match devices.map(str::trim) {
        None => 1,
        Some(spec) => spec.parse::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
            format!(
                "--devices {spec} with --cluster: give the number of devices to hold on the cluster, e.g. \
                 `--devices 2` (the cluster picks them)"
            )
        })?,
    };
    Ok((0..n)
        .map(|_| Device {
            ray: Some(address.to_string()),
            ..Device::default()
        })
        .collect())
}

/// What the worker of GPU `index` is given as `CUDA_VISIBLE_DEVICES`: the index-th of the GPUs this process
/// may use (the list it was given itself, e.g. by a job scheduler, else all of them).
pub fn visible_gpu(index: u32, inherited: Option<&str>) -> Result<String, String> {
    match inherited.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(index.to_string()),
        Some(list) => list
            .split(',')
            .map(str::trim)
            .nth(index as usize)
            .map(str::to_string)
            .ok_or_else(|| {
                format!(
                    "GPU {index}: CUDA_VISIBLE_DEVICES={list} gives this process only {} GPU(s); name those \
                     (0 to {}) in --devices",
                    list.split(',').count(),
                    list.split(',').count().saturating_sub(1)
                )
            }),
    }
}

/// The CPU cores this process may run on, in order.
pub fn available_cores() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a zeroed cpu_set_t is a valid empty set, filled by the call.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
                return (0..libc::CPU_SETSIZE as usize)
                    .filter(|&c| libc::CPU_ISSET(c, &set))
                    .collect();
            }
        }
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// Pins the calling process (between fork and exec: only async-signal-safe calls) to `cores`.
/// Elsewhere than on Linux it does nothing: macOS has no hard affinity.
#[allow(unused_variables)]
pub fn pin_self(cores: &[usize]) {
    #[cfg(target_os = "linux")]
    // SAFETY: memory operations on a local set and one system call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cores(d: &[Device]) -> Vec<Vec<usize>> {
        d.iter().map(|d| d.cores.clone().unwrap()).collect()
    }

    #[test]
    fn cpu_workers_get_disjoint_contiguous_shares_of_the_cores() {
        let all: Vec<usize> = (0..8).collect();
        assert_eq!(
            cores(&parse("2", Target::Cpu, &all).unwrap()),
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
        );
        // 7 cores over 3 workers: 2 each, the last one unused; cores the process may not use are never
        // handed out.
        let some = [0, 1, 2, 4, 5, 6, 7];
        assert_eq!(
            cores(&parse("3", Target::Cpu, &some).unwrap()),
            vec![vec![0, 1], vec![2, 4], vec![5, 6]]
        );
        assert_eq!(
            parse("1", Target::Cpu, &all).unwrap(),
            vec![Device::default()]
        );
        let e = parse("9", Target::Cpu, &all).unwrap_err();
        assert!(e.contains("8 core(s) (0-7)") && e.contains("1 to 8"), "{e}");
        assert!(
            parse("0,1", Target::Cpu, &all)
                .unwrap_err()
                .contains("number of workers")
        );
        assert!(parse("0", Target::Cpu, &all).is_err());
    }

    #[test]
    fn a_cluster_holds_a_number_of_devices_at_an_address_it_checks() {
        let d = on_cluster("ray://head:10001", Some("3"), Target::Cpu).unwrap();
        assert_eq!(d.len(), 3);
        assert!(
            d.iter()
                .all(|d| d.ray.as_deref() == Some("ray://head:10001"))
        );
        assert_eq!(d[0].label(), "ray actor at ray://head:10001");
        assert_eq!(on_cluster("auto", None, Target::MlxCuda).unwrap().len(), 1);
        assert!(
            on_cluster("head", None, Target::Cpu)
                .unwrap_err()
                .contains("HOST:PORT")
        );
        assert!(
            on_cluster("10.0.0.1:6379", Some("0,1"), Target::MlxCuda)
                .unwrap_err()
                .contains("number of devices")
        );
        assert!(on_cluster("auto", None, Target::MlxMetal).is_err());
    }

    #[test]
    fn gpus_are_named_by_count_or_index_and_never_twice() {
        let g = |s| -> Vec<Option<u32>> {
            parse(s, Target::MlxCuda, &[0])
                .unwrap()
                .iter()
                .map(|d| d.gpu)
                .collect()
        };
        assert_eq!(g("2"), vec![Some(0), Some(1)]);
        assert_eq!(g("1, 3"), vec![Some(1), Some(3)]);
        assert!(
            parse("1,1", Target::MlxCuda, &[0])
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            parse("gpu0", Target::MlxCuda, &[0])
                .unwrap_err()
                .contains("expected a number")
        );
        assert!(
            parse("2", Target::MlxMetal, &[0])
                .unwrap_err()
                .contains("one GPU")
        );
        assert_eq!(
            Device {
                cores: Some(vec![0, 1, 2, 5]),
                ..Device::default()
            }
            .label(),
            "cores 0-2,5"
        );
    }
}
