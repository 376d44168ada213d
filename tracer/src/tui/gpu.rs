//! Each GPU's utilisation, memory and power, from the NVIDIA management
//! library where it is installed. Read on a thread of its own: an NVML call
//! can take milliseconds, and the screen must not wait for it.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nvml_wrapper::Nvml;

#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GpuStat {
    pub index: u32,
    pub name: String,
    /// Percent of time a kernel ran over NVML's last sample period.
    pub util_pct: Option<u32>,
    pub mem_used: Option<u64>,
    pub mem_total: Option<u64>,
    pub power_mw: Option<u32>,
    pub power_limit_mw: Option<u32>,
}

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum GpuStatus {
    /// Not read yet.
    Pending,
    /// NVML could not be used: why.
    Unavailable(String),
    Gpus(Vec<GpuStat>),
}

/// Opens NVML: the driver's `libnvidia-ml.so.1` (installed without the
/// `.so` development link on most nodes), else whatever `libnvidia-ml.so` is.
fn open() -> Result<Nvml, String> {
    match Nvml::builder()
        .lib_path(OsStr::new("libnvidia-ml.so.1"))
        .init()
    {
        Ok(n) => Ok(n),
        Err(first) => Nvml::init().map_err(|_| {
            let why = first.to_string();
            why.trim_start_matches("a libloading error occurred: ")
                .to_string()
        }),
    }
}

fn read(nvml: &Nvml) -> GpuStatus {
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => return GpuStatus::Unavailable(format!("NVML: {e}")),
    };
    let gpus = (0..count)
        .filter_map(|i| {
            let d = nvml.device_by_index(i).ok()?;
            let mem = d.memory_info().ok();
            Some(GpuStat {
                index: i,
                name: d.name().unwrap_or_else(|_| "?".into()),
                util_pct: d.utilization_rates().ok().map(|u| u.gpu),
                mem_used: mem.as_ref().map(|m| m.used),
                mem_total: mem.as_ref().map(|m| m.total),
                power_mw: d.power_usage().ok(),
                power_limit_mw: d.enforced_power_limit().ok(),
            })
        })
        .collect();
    GpuStatus::Gpus(gpus)
}

/// The latest reading, refreshed every interval by a thread.
pub(crate) struct GpuMonitor {
    latest: Arc<Mutex<GpuStatus>>,
    stop: Arc<AtomicBool>,
}

impl GpuMonitor {
    pub(crate) fn start(interval: Duration) -> Self {
        let latest = Arc::new(Mutex::new(GpuStatus::Pending));
        let stop = Arc::new(AtomicBool::new(false));
        let (l, s) = (latest.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("gputrace-nvml".into())
            .spawn(move || {
                let set = |v| *l.lock().unwrap_or_else(|e| e.into_inner()) = v;
                let nvml = match open() {
                    Ok(n) => n,
                    Err(e) => return set(GpuStatus::Unavailable(e)),
                };
                while !s.load(Ordering::Relaxed) {
                    set(read(&nvml));
                    std::thread::sleep(interval);
                }
            });
        if let Err(e) = spawned {
            *latest.lock().unwrap_or_else(|e| e.into_inner()) =
                GpuStatus::Unavailable(format!("cannot start the NVML thread: {e}"));
        }
        Self { latest, stop }
    }

    pub(crate) fn latest(&self) -> GpuStatus {
        self.latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for GpuMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
