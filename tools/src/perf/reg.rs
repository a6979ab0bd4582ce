//! `rnic perf reg`: the registration-versus-copy rule, measured. Sending a buffer the
//! NIC may not yet read takes either a copy into an already registered ("bounce")
//! buffer, or registering the buffer itself (and deregistering it after). Copying costs
//! per byte; registering costs a fixed amount plus, with pinning, per page. This times
//! both over sizes from 4 KiB up and prints where registering starts to win.
//!
//! What is timed, through rnic-verbs as a program calls it: copy = `MemoryRegion::write`
//! of N bytes from the application's buffer into a registered bounce region; register =
//! `ProtectionDomain::register_mr` of the application's buffer, whose pages are already
//! faulted in, and dropping the region (deregistration) on a device that pins (mlock, as a
//! real driver pins with get_user_pages, and munlock) and on one opened with pinning off.
//! Each figure is the median of repeated runs (at least 5, and at least 20 ms).

use rnic_verbs::{AccessFlags, Context, DeviceConfig, ProtectionDomain};
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

/// One size's results, nanoseconds per operation (medians).
#[derive(Debug, Clone)]
pub struct RegRow {
    /// Bytes.
    pub bytes: usize,
    /// Copying them into a registered buffer.
    pub copy_ns: f64,
    /// Registering and deregistering them with pinning.
    pub reg_pinned_ns: Option<f64>,
    /// The same without pinning.
    pub reg_unpinned_ns: f64,
    /// Why pinning was not measured (RLIMIT_MEMLOCK), if it was not.
    pub pin_error: Option<String>,
}

fn median_ns(mut f: impl FnMut() -> Result<(), String>) -> Result<f64, String> {
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < 5 || (start.elapsed() < Duration::from_millis(20) && samples.len() < 100_000) {
        let t = Instant::now();
        f()?;
        samples.push(t.elapsed().as_nanos() as f64);
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[samples.len() / 2])
}

/// A protection domain on a device of its own (loopback address `ip`), pinning or not.
fn pd_on(ip: Ipv4Addr, pin: bool) -> Result<ProtectionDomain, String> {
    let mut cfg = DeviceConfig::new(format!("rnic-reg{}", ip.octets()[3]), IpAddr::V4(ip));
    cfg.pin_memory = pin;
    let ctx = Context::open_with(cfg).map_err(|e| e.report())?;
    ctx.alloc_pd().map_err(|e| e.report())
}

/// Measures every size from 4 KiB to `max` bytes, multiplying by 4.
pub fn measure(max: usize) -> Result<Vec<RegRow>, String> {
    let pinning = pd_on(Ipv4Addr::new(127, 0, 93, 1), true)?;
    let plain = pd_on(Ipv4Addr::new(127, 0, 93, 2), false)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let mut rows = Vec::new();
    let mut n = 4096usize;
    while n <= max {
        // The application's data: its pages are faulted in, as a buffer in use is.
        let mut app = vec![0x5au8; n];
        let bounce = plain.allocate_mr(n, access).map_err(|e| format!("{n} bytes: {}", e.report()))?;
        bounce.write(0, &app).map_err(|e| e.report())?;
        let copy_ns = median_ns(|| bounce.write(0, &app).map_err(|e| e.report()))?;
        let ptr = app.as_mut_ptr();
        let reg = |pd: &ProtectionDomain| {
            median_ns(|| {
                // SAFETY: `app` outlives the region, which is dropped (deregistered) at
                // once; nothing posts work on it, so the NIC never touches the bytes.
                let mr = unsafe { pd.register_mr(ptr, n, access) }.map_err(|e| e.report())?;
                drop(mr);
                Ok(())
            })
        };
        let reg_unpinned_ns = reg(&plain)?;
        let (reg_pinned_ns, pin_error) = match reg(&pinning) {
            Ok(x) => (Some(x), None),
            Err(e) => (None, Some(e)),
        };
        drop(app);
        rows.push(RegRow { bytes: n, copy_ns, reg_pinned_ns, reg_unpinned_ns, pin_error });
        n = n.saturating_mul(4);
    }
    Ok(rows)
}

/// The smallest size at which registering (with or without pinning) is cheaper than
/// copying, if any.
pub fn crossover(rows: &[RegRow], pinned: bool) -> Option<usize> {
    rows.iter()
        .find(|r| {
            let reg = if pinned { r.reg_pinned_ns } else { Some(r.reg_unpinned_ns) };
            reg.is_some_and(|g| g < r.copy_ns)
        })
        .map(|r| r.bytes)
}

fn human(n: usize) -> String {
    match n {
        n if n >= 1 << 30 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 => format!("{} MiB", n >> 20),
        _ => format!("{} KiB", n >> 10),
    }
}

fn us(ns: f64) -> String {
    format!("{:.2}", ns / 1e3)
}

/// Runs `rnic perf reg`: the table, the crossover and what it means (or JSON).
pub fn run(max: usize, json_out: bool) -> Result<(), String> {
    let rows = measure(max)?;
    let pin_x = crossover(&rows, true);
    let nopin_x = crossover(&rows, false);
    if json_out {
        let v: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "bytes": r.bytes,
                    "copy_us": r.copy_ns / 1e3,
                    "reg_dereg_pinned_us": r.reg_pinned_ns.map(|x| x / 1e3),
                    "reg_dereg_unpinned_us": r.reg_unpinned_ns / 1e3,
                    "pin_error": r.pin_error,
                })
            })
            .collect();
        println!("{}", json!({ "rows": v, "crossover_pinned_bytes": pin_x, "crossover_unpinned_bytes": nopin_x }));
        return Ok(());
    }
    println!("registration vs copy: send N bytes from a buffer the NIC cannot read yet");
    println!(
        " {:<10} {:>12} {:>22} {:>24}  {:<16} reuses to pay off",
        "size", "copy [us]", "reg+dereg pinned [us]", "reg+dereg unpinned [us]", "cheaper (pinned)"
    );
    for r in &rows {
        let pinned = r.reg_pinned_ns.map_or_else(|| "refused".to_string(), us);
        let winner = match r.reg_pinned_ns {
            Some(p) if p < r.copy_ns => "register",
            Some(_) => "copy",
            None => "-",
        };
        let reuses = r.reg_pinned_ns.map_or_else(String::new, |p| format!("{:.0}", (p / r.copy_ns).ceil().max(1.0)));
        println!(
            " {:<10} {:>12} {:>22} {:>24}  {winner:<16} {reuses}",
            human(r.bytes),
            us(r.copy_ns),
            pinned,
            us(r.reg_unpinned_ns)
        );
    }
    if let Some(e) = rows.iter().find_map(|r| r.pin_error.as_ref()) {
        println!("pinning was refused ({e}): raise `ulimit -l` to measure it");
    }
    match pin_x {
        Some(x) => println!(
            "\ncrossover on this machine: from about {} registering (with pinning, as a real NIC pins) costs less than copying.",
            human(x)
        ),
        None => println!(
            "\nno crossover up to {}: for a buffer used once, copying stayed cheaper than registering it with pinning.",
            human(max)
        ),
    }
    println!(
        "A registration used for several transfers is paid once: the last column is how many transfers from the same\n\
         buffer make registering it (once) cheaper than copying it every time."
    );
    println!(
        "What it means: below the crossover, SEND from a registered bounce buffer (copy the data in); above it, register\n\
         the buffer itself and use RDMA WRITE/READ on it. Either way register once and reuse: a region that lives\n\
         across many transfers costs nothing per transfer, which is why MPI and UCX keep a registration cache and\n\
         deregister lazily. Without pinning registration is only a table entry here ({}), but a real NIC must pin\n\
         (and map) every page, which is what the pinned column measures.",
        nopin_x.map_or("never cheaper".into(), |x| format!("cheaper from {}", human(x)))
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crossover_is_the_first_size_where_registering_wins() {
        let row =
            |bytes, copy_ns, p| RegRow { bytes, copy_ns, reg_pinned_ns: p, reg_unpinned_ns: 1.0, pin_error: None };
        let rows = [row(4096, 1.0, Some(9.0)), row(16384, 4.0, Some(8.0)), row(65536, 16.0, Some(10.0))];
        assert_eq!(crossover(&rows, true), Some(65536));
        assert_eq!(crossover(&rows[..2], true), None);
        assert_eq!(crossover(&rows, false), Some(16384));
        assert_eq!(human(1 << 30), "1 GiB");
    }

    #[test]
    fn a_small_measurement_runs() {
        let rows = measure(16384).unwrap();
        assert_eq!(rows.iter().map(|r| r.bytes).collect::<Vec<_>>(), [4096, 16384]);
        assert!(rows.iter().all(|r| r.copy_ns > 0.0 && r.reg_unpinned_ns > 0.0));
    }
}
