//! `rnic demo --congest`: DCQCN at work, watched. One RC QP streams 64 KiB RDMA WRITEs
//! from rnic0 to rnic1 through three phases: uncongested, then a "switch" (a fault rule on
//! rnic0's wire) marks a share of its packets ECN congestion-experienced, then the marks
//! stop. Every 100 ms a line shows the QP's DCQCN rate, the throughput, and the CNPs rnic1
//! sent and rnic0 handled; at the end every slot of the target buffer is verified.

use super::{open, pattern, Side};
use rnic_verbs::{Fault, FaultHandle, Faults};
use rnic_verbs::{PathMtu, SendOp, SendWr, WcStatus};
use std::net::IpAddr;
use std::time::{Duration, Instant};

const SLOT: usize = 65_536;
const SLOT_U32: u32 = 65_536;
const SLOTS: usize = 16;
const TICK: Duration = Duration::from_millis(100);

/// (name, how long, share of rnic0's packets marked CE).
const PHASES: [(&str, Duration, f64); 3] = [
    ("uncongested", Duration::from_millis(300), 0.0),
    ("congested", Duration::from_millis(400), 0.02),
    ("recovering", Duration::from_millis(700), 0.0),
];

fn counter(side: &Side, name: &str) -> u64 {
    side.ctx.counter(name).unwrap_or(0)
}

/// Runs the congestion demo; `Ok(true)` when every slot verified.
pub(super) fn run(ip: IpAddr, peer_ip: IpAddr, seed: u64) -> Result<bool, String> {
    let faults = FaultHandle::new(Faults::new(seed));
    let a = open("rnic0", ip, None, &None, Some(faults.clone()))?;
    let b = open("rnic1", peer_ip, None, &None, None)?;
    if a.ctx.config().is_some_and(|c| c.congestion_control.params().is_none()) {
        return Err("--congest shows DCQCN, but RNIC_CC=off turns it off: unset RNIC_CC".into());
    }
    let qa = a.pd.qp_builder(&a.cq, &a.cq).mtu(PathMtu::Mtu4096).build().map_err(|e| rnic_verbs::report(&e))?;
    let qb = b.pd.qp_builder(&b.cq, &b.cq).mtu(PathMtu::Mtu4096).build().map_err(|e| rnic_verbs::report(&e))?;
    let (ea, eb) = (qa.endpoint(), qb.endpoint());
    let qa = qa.connect(&eb).map_err(|e| rnic_verbs::report(&e))?;
    let _qb = qb.connect(&ea).map_err(|e| rnic_verbs::report(&e))?;
    for k in 0..SLOTS {
        let seed = u32::try_from(k).unwrap_or(0) + 77;
        a.mr.write(k * SLOT, &pattern(seed, SLOT)).map_err(|e| rnic_verbs::report(&e))?;
    }
    let remote = b.mr.remote();
    let post = |k: usize| {
        let op = SendOp::RdmaWrite { remote_addr: remote.addr + (k * SLOT) as u64, rkey: remote.rkey };
        qa.post_send(&SendWr::new(k as u64, op, vec![a.mr.sge(k * SLOT, SLOT_U32)])).map_err(|e| rnic_verbs::report(&e))
    };
    println!("rnic demo --congest: DCQCN on one RC QP, rnic0 -> rnic1, 64 KiB RDMA WRITEs kept 16 deep");
    println!("  a fault rule on rnic0's wire plays a congested switch: it sets ECN CE on a share of the packets;");
    println!("  rnic1 (notification point) answers with CNPs, rnic0 (reaction point) cuts the QP's rate and");
    println!("  paces it, then recovers on DCQCN's timers and byte counter (mlx5's parameters).\n");
    println!(
        "  {:>6}  {:<12} {:>7}  {:>12}  {:>14}  {:>6}  {:>8}",
        "t[ms]", "phase", "CE[%]", "rate[MB/s]", "throughput", "CNPs", "handled"
    );
    for k in 0..SLOTS {
        post(k)?;
    }
    let start = Instant::now();
    let mut done_bytes = 0u64;
    let (mut low, mut cut_at, mut back_at): (f64, Option<Duration>, Option<Duration>) = (f64::MAX, None, None);
    let mut prev = (0u64, counter(&b, "np_cnp_sent"), counter(&a, "rp_cnp_handled"));
    let mut tick_end = TICK;
    for (name, len, share) in PHASES {
        {
            let mut f = faults.lock();
            f.clear();
            if share > 0.0 {
                f.add(Fault::mark_ce().requests().probability(share));
            }
        }
        let phase_end = start.elapsed() + len;
        while start.elapsed() < phase_end {
            for wc in a.cq.wait(1, Duration::from_secs(10)).map_err(|e| rnic_verbs::report(&e))? {
                if wc.status != WcStatus::Success {
                    return Err(format!("rnic0's WRITE failed: {wc}"));
                }
                done_bytes += SLOT as u64;
                post(usize::try_from(wc.wr_id).unwrap_or(0))?;
            }
            if start.elapsed() >= tick_end {
                let rate = a.ctx.qp_rates().first().map_or(f64::NAN, |r| r.rate);
                let cnps = (counter(&b, "np_cnp_sent"), counter(&a, "rp_cnp_handled"));
                let thr = (done_bytes - prev.0) as f64 / TICK.as_secs_f64() / 1e6;
                println!(
                    "  {:>6}  {:<12} {:>7.1}  {:>12.1}  {:>9.1} MB/s  {:>6}  {:>8}",
                    tick_end.as_millis(),
                    name,
                    share * 100.0,
                    rate / 1e6,
                    thr,
                    cnps.0 - prev.1,
                    cnps.1 - prev.2
                );
                if share > 0.0 {
                    low = low.min(rate);
                    cut_at.get_or_insert(tick_end);
                }
                if share == 0.0 && cut_at.is_some() && back_at.is_none() && rate >= rnic_verbs::CC_LINE_RATE {
                    back_at = Some(tick_end);
                }
                prev = (done_bytes, cnps.0, cnps.1);
                tick_end += TICK;
            }
        }
    }
    // Drain the WRITEs in flight, then check every slot.
    let mut outstanding = SLOTS;
    while outstanding > 0 {
        for wc in a.cq.wait(1, Duration::from_secs(10)).map_err(|e| rnic_verbs::report(&e))? {
            if wc.status != WcStatus::Success {
                return Err(format!("rnic0's WRITE failed: {wc}"));
            }
            outstanding -= 1;
        }
    }
    let mut ok = true;
    let mut got = vec![0u8; SLOT];
    for k in 0..SLOTS {
        b.mr.read(k * SLOT, &mut got).map_err(|e| rnic_verbs::report(&e))?;
        ok &= got == pattern(u32::try_from(k).unwrap_or(0) + 77, SLOT);
    }
    println!();
    if low < f64::MAX {
        println!(
            "  under 2% CE marks the QP's rate fell to {:.1} MB/s (line rate {:.0} MB/s)",
            low / 1e6,
            rnic_verbs::CC_LINE_RATE / 1e6
        );
    }
    match back_at {
        Some(t) => println!("  after the marks stopped it was back at line rate by t = {} ms", t.as_millis()),
        None => println!("  the marks stopped; it had not yet recovered to line rate when the demo ended"),
    }
    let c: Vec<String> = ["np_ecn_marked_roce_packets", "np_cnp_sent"]
        .iter()
        .map(|n| format!("rnic1 {n}={}", counter(&b, n)))
        .chain(
            ["rp_cnp_handled", "rp_loss_handled", "rp_paced"].iter().map(|n| format!("rnic0 {n}={}", counter(&a, n))),
        )
        .collect();
    println!("  {}", c.join(" "));
    println!(
        "  {} MB written; {} of {SLOTS} target slots verified byte for byte",
        done_bytes / 1_000_000,
        if ok { SLOTS } else { 0 }
    );
    Ok(ok)
}
