//! `rnic demo`: the main job. Two emulated devices in this process, one RC connection
//! per path MTU, and SEND, RDMA WRITE with immediate and RDMA READ of several sizes,
//! every byte verified, told so that a student can follow who did what.

use rnic_verbs::{
    AccessFlags, CompletionQueue, Context, MemoryRegion, PathMtu, QueuePair, RecvWr, SendOp, SendWr, WcStatus,
    WorkCompletion,
};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `rnic demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Local address of the first device, rnic0.
    #[arg(long, default_value = "127.0.0.1")]
    pub ip: IpAddr,
    /// Local address of the second device, rnic1.
    #[arg(long, default_value = "127.0.0.2")]
    pub peer_ip: IpAddr,
    /// Write every packet sent and received to this pcap file.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Path MTUs to run, in bytes (256, 512, 1024, 2048, 4096).
    #[arg(long, value_delimiter = ',', default_value = "256,1024,4096")]
    pub mtus: Vec<u32>,
    /// Print only the summary.
    #[arg(short, long)]
    pub quiet: bool,
}

const BUF: usize = 1 << 20;
const TIMEOUT: Duration = Duration::from_secs(10);

struct Side {
    ctx: Context,
    pd: rnic_verbs::ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
}

fn open(name: &str, ip: IpAddr, pcap: &Option<PathBuf>) -> Result<Side, String> {
    let mut cfg = rnic_core::device::DeviceConfig::new(name, ip);
    if let Some(p) = pcap {
        cfg.capture = Some(p.clone());
    }
    let ctx = Context::open_with(cfg).map_err(|e| e.to_string())?;
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(256).map_err(|e| e.to_string())?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = pd.allocate_mr(BUF, access).map_err(|e| e.to_string())?;
    Ok(Side { ctx, pd, cq, mr })
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x.to_le_bytes()[1]
        })
        .collect()
}

fn packets(len: usize, mtu: usize) -> usize {
    len.div_ceil(mtu).max(1)
}

/// The opcodes a message of `n` packets is carried by; `end` is appended to the name of
/// the packet that ends it (`_WITH_IMMEDIATE` where the immediate rides).
fn shape(op: &str, n: usize, end: &str) -> String {
    match n {
        1 => format!("{op}_ONLY{end}"),
        2 => format!("{op}_FIRST, {op}_LAST{end}"),
        _ => format!("{op}_FIRST, {} x {op}_MIDDLE, {op}_LAST{end}", n - 2),
    }
}

struct Demo {
    a: Side,
    b: Side,
    quiet: bool,
    ok: usize,
    failed: Vec<String>,
}

impl Demo {
    fn say(&self, s: impl AsRef<str>) {
        if !self.quiet {
            println!("{}", s.as_ref());
        }
    }

    fn sent(side: &Side) -> u64 {
        side.ctx.counter("sent_pkts").unwrap_or(0)
    }

    fn check(&mut self, what: String, good: bool, why: impl FnOnce() -> String) {
        if good {
            self.ok += 1;
            self.say(format!("    -> verified: {what}"));
        } else {
            let w = why();
            self.say(format!("    -> FAILED: {what}: {w}"));
            self.failed.push(format!("{what}: {w}"));
        }
    }

    fn wc(&self, cq: &CompletionQueue) -> Result<WorkCompletion, String> {
        cq.wait(1, TIMEOUT).map(|v| v[0]).map_err(|e| e.to_string())
    }

    fn run_mtu(&mut self, mtu: PathMtu) -> Result<(), String> {
        let m = mtu.bytes() as usize;
        let qa = qp(&self.a, mtu)?;
        let qb = qp(&self.b, mtu)?;
        let (ea, eb) = (qa.endpoint(), qb.endpoint());
        let qa = qa.connect(&eb).map_err(|e| e.to_string())?;
        let qb = qb.connect(&ea).map_err(|e| e.to_string())?;
        self.say(format!(
            "\n== path MTU {m}: rnic0 QP {:#x} (first PSN {:#08x}) <-> rnic1 QP {:#x} (first PSN {:#08x}) ==",
            ea.qpn, ea.psn, eb.qpn, eb.psn
        ));
        for (i, len) in (0u32..).zip([1usize, m, 3 * m + 1, 65536]) {
            let seed = mtu.bytes() * 10 + i;
            self.send(&qa, &qb, m, len, seed)?;
            self.write_imm(&qa, &qb, m, len, seed + 1000)?;
            self.read(&qa, m, len, seed + 2000)?;
        }
        Ok(())
    }

    fn send(&mut self, qa: &QueuePair, qb: &QueuePair, mtu: usize, len: usize, seed: u32) -> Result<(), String> {
        let data = pattern(seed, len);
        self.a.mr.write(0, &data).map_err(|e| e.to_string())?;
        self.b.mr.write(0, &vec![0u8; len]).map_err(|e| e.to_string())?;
        let (sa, sb) = (Self::sent(&self.a), Self::sent(&self.b));
        qb.post_recv(&RecvWr { wr_id: 10, sg_list: vec![self.b.mr.sge(0, len32(len))] }).map_err(|e| e.to_string())?;
        qa.post_send(&SendWr::send(1, vec![self.a.mr.sge(0, len32(len))])).map_err(|e| e.to_string())?;
        let (wa, wb) = (self.wc(&self.a.cq)?, self.wc(&self.b.cq)?);
        let (da, db) = (Self::sent(&self.a) - sa, Self::sent(&self.b) - sb);
        self.say(format!("  SEND {len} B: rnic1's application posted a receive buffer; rnic0 sent {da} packet(s) [{}]", shape("SEND", packets(len, mtu), "")));
        self.say(format!("    rnic1's NIC placed the bytes and answered with {db} ACK(s)"));
        self.say(format!("    rnic1's CPU sees: {} {} ({} bytes)    rnic0's CPU sees: {} {}", wb.opcode.name(), wb.status, wb.byte_len, wa.opcode.name(), wa.status));
        let mut got = vec![0u8; len];
        self.b.mr.read(0, &mut got).map_err(|e| e.to_string())?;
        let good = wa.status == WcStatus::Success && wb.status == WcStatus::Success && wb.byte_len as usize == len && got == data;
        self.check(format!("SEND {len} B at MTU {mtu}"), good, || format!("completions {wa} / {wb}, bytes equal: {}", got == data));
        Ok(())
    }

    fn write_imm(&mut self, qa: &QueuePair, qb: &QueuePair, mtu: usize, len: usize, seed: u32) -> Result<(), String> {
        let data = pattern(seed, len);
        self.a.mr.write(0, &data).map_err(|e| e.to_string())?;
        let r = self.b.mr.remote();
        let (sa, sb) = (Self::sent(&self.a), Self::sent(&self.b));
        qb.post_recv(&RecvWr { wr_id: 11, sg_list: vec![] }).map_err(|e| e.to_string())?;
        let imm = 0xC0DE_0000 | (seed & 0xffff);
        let op = SendOp::RdmaWriteWithImm { remote_addr: r.addr + 4096, rkey: r.rkey, imm };
        qa.post_send(&SendWr::new(2, op, vec![self.a.mr.sge(0, len32(len))])).map_err(|e| e.to_string())?;
        let (wa, wb) = (self.wc(&self.a.cq)?, self.wc(&self.b.cq)?);
        let (da, db) = (Self::sent(&self.a) - sa, Self::sent(&self.b) - sb);
        self.say(format!(
            "  RDMA_WRITE_WITH_IMM {len} B into rnic1 at {:#x} (rkey {:#x}): rnic0 sent {da} packet(s) [{}]",
            r.addr + 4096,
            r.rkey,
            shape("RDMA_WRITE", packets(len, mtu), "_WITH_IMMEDIATE")
        ));
        self.say(format!("    rnic1's NIC wrote its memory and sent {db} ACK(s); the immediate consumed one receive WQE"));
        self.say(format!("    rnic1's CPU sees: {} imm={:#x} ({} bytes)    rnic0's CPU sees: {} {}", wb.opcode.name(), wb.imm_data, wb.byte_len, wa.opcode.name(), wa.status));
        let mut got = vec![0u8; len];
        self.b.mr.read(4096, &mut got).map_err(|e| e.to_string())?;
        let good = wa.status == WcStatus::Success && wb.imm_data == imm && wb.wc_flags.with_imm && got == data;
        self.check(format!("RDMA_WRITE_WITH_IMM {len} B at MTU {mtu}"), good, || format!("completions {wa} / {wb}, bytes equal: {}", got == data));
        Ok(())
    }

    fn read(&mut self, qa: &QueuePair, mtu: usize, len: usize, seed: u32) -> Result<(), String> {
        let data = pattern(seed, len);
        self.b.mr.write(8192, &data).map_err(|e| e.to_string())?;
        self.a.mr.write(BUF / 2, &vec![0u8; len]).map_err(|e| e.to_string())?;
        let r = self.b.mr.remote();
        let (sa, sb) = (Self::sent(&self.a), Self::sent(&self.b));
        let op = SendOp::RdmaRead { remote_addr: r.addr + 8192, rkey: r.rkey };
        qa.post_send(&SendWr::new(3, op, vec![self.a.mr.sge(BUF / 2, len32(len))])).map_err(|e| e.to_string())?;
        let wa = self.wc(&self.a.cq)?;
        let (da, db) = (Self::sent(&self.a) - sa, Self::sent(&self.b) - sb);
        self.say(format!("  RDMA_READ {len} B from rnic1 at {:#x}: rnic0 sent {da} READ request; rnic1's NIC answered with {db} packet(s) [{}]", r.addr + 8192, shape("RDMA_READ_RESPONSE", packets(len, mtu), "")));
        self.say(format!("    rnic1's CPU sees: nothing (one-sided; its CQ holds {})    rnic0's CPU sees: {} {} ({} bytes)", self.b.cq.len(), wa.opcode.name(), wa.status, wa.byte_len));
        let mut got = vec![0u8; len];
        self.a.mr.read(BUF / 2, &mut got).map_err(|e| e.to_string())?;
        let good = wa.status == WcStatus::Success && self.b.cq.is_empty() && got == data;
        self.check(format!("RDMA_READ {len} B at MTU {mtu}"), good, || format!("completion {wa}, bytes equal: {}", got == data));
        Ok(())
    }
}

fn len32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn qp(side: &Side, mtu: PathMtu) -> Result<rnic_verbs::PreparedQp, String> {
    side.pd.qp_builder(&side.cq, &side.cq).mtu(mtu).build().map_err(|e| e.to_string())
}

/// Runs the demo; 0 when every transfer verified.
pub fn run(args: &Args) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rnic demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn run_inner(args: &Args) -> Result<ExitCode, String> {
    let mut mtus = Vec::new();
    for m in &args.mtus {
        mtus.push(PathMtu::from_bytes(*m).ok_or_else(|| format!("--mtus: {m} is not one of 256, 512, 1024, 2048, 4096"))?);
    }
    let a = open("rnic0", args.ip, &args.pcap)?;
    let b = open("rnic1", args.peer_ip, &args.pcap)?;
    let mut d = Demo { a, b, quiet: args.quiet, ok: 0, failed: Vec::new() };
    d.say("rnic demo: two emulated RoCEv2 devices in this process, talking RoCEv2 over UDP port 4791");
    d.say(format!("  rnic0 at {} (GID {}), rnic1 at {} (GID {})", args.ip, d.a.ctx.gid(0).map(|g| g.to_string()).unwrap_or_default(), args.peer_ip, d.b.ctx.gid(0).map(|g| g.to_string()).unwrap_or_default()));
    d.say("  each side registered 1 MiB (LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ) and connected one RC QP per MTU");
    for m in mtus {
        d.run_mtu(m)?;
    }
    let total = d.ok + d.failed.len();
    println!("\nrnic demo: {} of {total} transfers verified byte for byte", d.ok);
    for (n, v) in d.a.ctx.counters().into_iter().filter(|(_, v)| *v > 0) {
        if !args.quiet {
            println!("  rnic0 {n} = {v}");
        }
    }
    for (n, v) in d.b.ctx.counters().into_iter().filter(|(_, v)| *v > 0) {
        if !args.quiet {
            println!("  rnic1 {n} = {v}");
        }
    }
    let failed = std::mem::take(&mut d.failed);
    // Closing the devices flushes the capture file.
    drop(d);
    if let Some(p) = &args.pcap {
        println!("  every packet sent and received is in {}", p.display());
    }
    if failed.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        for f in &failed {
            eprintln!("FAILED: {f}");
        }
        Ok(ExitCode::from(1))
    }
}
