//! The host's facts an operator checks first when recycles pile up: its
//! cores, memory total and available, load, and the supervisor's own RSS,
//! shown in `wfhost status` and served as metrics. Read through `sysinfo`
//! (only its `system` part), refreshing just these on each read: memory
//! (RAM, not swap), this one process's memory (without its threads, which
//! `nothing()` alone would still list: PITFALLS.md) and the load average.
//! The per-child RSS of the policy tick stays on kept-open `/proc` reads.

use std::sync::{Mutex, OnceLock};

use serde::Serialize;
use sysinfo::{
    CpuRefreshKind, MemoryRefreshKind, Pid, ProcessRefreshKind, ProcessesToUpdate, System,
};

/// What the host looks like now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Host {
    /// Logical CPUs: what the load average compares with.
    pub cores: usize,
    /// Memory installed, in bytes.
    pub memory_total_bytes: u64,
    /// Memory available to new work (the kernel's MemAvailable), in bytes.
    pub memory_available_bytes: u64,
    /// Load averages over 1, 5 and 15 minutes.
    pub load: [f64; 3],
    /// The supervisor's pid.
    pub supervisor_pid: u32,
    /// The supervisor's resident memory, in bytes.
    pub supervisor_rss_bytes: u64,
}

/// The `sysinfo` state kept between reads.
struct Probe {
    system: System,
    me: Pid,
    cores: usize,
}

impl Probe {
    fn new() -> Option<Self> {
        let mut system = System::new().ok()?;
        system.refresh_cpu_list(CpuRefreshKind::nothing());
        let me = sysinfo::get_current_pid().ok()?;
        let cores = system.cpus().len();
        Some(Self { system, me, cores })
    }

    fn read(&mut self) -> Host {
        self.system
            .refresh_memory_specifics(MemoryRefreshKind::nothing().with_ram());
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[self.me]),
            false,
            ProcessRefreshKind::nothing().with_memory().without_tasks(),
        );
        let load = System::load_average().map_or([0.0; 3], |l| [l.one, l.five, l.fifteen]);
        Host {
            cores: self.cores,
            memory_total_bytes: self.system.total_memory(),
            memory_available_bytes: self.system.available_memory(),
            load,
            supervisor_pid: self.me.as_u32(),
            supervisor_rss_bytes: self.system.process(self.me).map_or(0, |p| p.memory()),
        }
    }
}

static PROBE: OnceLock<Mutex<Option<Probe>>> = OnceLock::new();

/// The host's facts now, or `None` where `sysinfo` cannot read them.
pub fn now() -> Option<Host> {
    let probe = PROBE.get_or_init(|| Mutex::new(Probe::new()));
    let mut probe = probe.lock().unwrap_or_else(|p| p.into_inner());
    probe.as_mut().map(Probe::read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_reads_as_proc_says() {
        let host = now().expect("sysinfo works on Linux");
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("cpuinfo");
        let processors = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count();
        assert_eq!(host.cores, processors);
        assert!(host.memory_total_bytes > host.memory_available_bytes);
        assert!(host.memory_available_bytes > 0);
        assert_eq!(host.supervisor_pid, std::process::id());
        let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
        let pages: u64 = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .expect("rss");
        let rss = pages * 4096;
        let (lo, hi) = (rss / 2, rss * 2);
        assert!(
            (lo..hi).contains(&host.supervisor_rss_bytes),
            "{} against /proc's {rss}",
            host.supervisor_rss_bytes
        );
        let loadavg = std::fs::read_to_string("/proc/loadavg").expect("loadavg");
        let one: f64 = loadavg
            .split_whitespace()
            .next()
            .and_then(|l| l.parse().ok())
            .expect("load");
        assert!(
            (host.load[0] - one).abs() < 1.0,
            "{:?} against {one}",
            host.load
        );
    }
}
