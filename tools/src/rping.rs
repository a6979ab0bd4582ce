//! `rnic rping`: rdma_cm's ping (rdmacm-utils' `rping`), on rnic, speaking the same
//! protocol over a connection made through the CM, so it pairs with the stock `rping`.
//!
//! Each ping (as rping.c): the client fills its start buffer with `rdma-ping-N: ` and a
//! rotating run of letters, and SENDs its address, R_Key and size (`struct
//! rping_rdma_info`: big-endian u64 buf, u32 rkey, u32 size); the server RDMA READs it,
//! SENDs "go ahead"; the client SENDs its sink buffer's address; the server RDMA WRITEs
//! what it read there and SENDs "go ahead" again; the client compares (`-V`) and prints
//! (`-v`). The server serves one client (`-P`: one after another) and ends when it
//! disconnects.

use rnic_verbs::{
    AccessFlags, CmEvent, CompletionQueue, Connection, Context, MemoryRegion, RecvWr, SendOp, SendWr, WcOpcode,
    WcStatus,
};
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `rnic rping` (rping's letters; `-V` validates, as rping's, so there is
/// no `-V` for the version here).
#[derive(Debug, clap::Args)]
#[command(disable_version_flag = true)]
pub struct Args {
    /// Server: listen on -a's address and port.
    #[arg(short = 's', conflicts_with = "client")]
    pub server: bool,
    /// Client: connect to -a's address and port.
    #[arg(short = 'c')]
    pub client: bool,
    /// The server's address (the server's own device address with -s).
    #[arg(short = 'a')]
    pub addr: IpAddr,
    /// Port (rdma_cm's TCP port space).
    #[arg(short = 'p', default_value_t = 7174)]
    pub port: u16,
    /// Pings to send (client; default: until interrupted). Server with -P: ignored.
    #[arg(short = 'C')]
    pub count: Option<u64>,
    /// Ping buffer size in bytes (rping's default 64; at least 16).
    #[arg(short = 'S', default_value_t = 64)]
    pub size: u32,
    /// Print each ping's data.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Validate each ping's data (client), exiting 1 on a mismatch.
    #[arg(short = 'V')]
    pub validate: bool,
    /// Debug: say what each step does.
    #[arg(short = 'd')]
    pub debug: bool,
    /// Server: persistent, serve one client after another.
    #[arg(short = 'P')]
    pub persistent: bool,
    /// The client's own device address (default: 127.0.0.2 when the server is 127.0.0.1).
    #[arg(short = 'I')]
    pub source: Option<IpAddr>,
    /// Server: hold each connect request this many seconds before accepting it (the CM
    /// answers the client's repeated REQ with an MRA meanwhile, so it keeps waiting).
    #[arg(long, default_value_t = 0.0)]
    pub hold: f64,
    /// Path MTU the client asks for in its REQ (rdma_cm takes it from the route: 1024 on a
    /// 1500-byte Ethernet; a Linux rxe peer does not clamp a larger one to its link).
    #[arg(long, default_value_t = 1024)]
    pub mtu: u32,
}

const WAIT: Duration = Duration::from_secs(30);
/// `struct rping_rdma_info`.
const INFO: usize = 16;
/// The same, as a scatter/gather length.
const INFO_LEN: u32 = 16;

/// Runs `rnic rping`.
pub fn run(a: &Args) -> ExitCode {
    if !a.server && !a.client {
        eprintln!("rnic rping: -s (server) or -c (client)");
        return ExitCode::from(2);
    }
    if a.size < 16 {
        eprintln!("rnic rping: -S {}: at least 16 bytes", a.size);
        return ExitCode::from(2);
    }
    let r = if a.server { server(a) } else { client(a) };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rnic rping: {e}");
            ExitCode::from(1)
        }
    }
}

struct Bufs {
    mr: MemoryRegion,
    size: usize,
}

impl Bufs {
    fn new(ctx: &Context, pd: &rnic_verbs::ProtectionDomain, size: u32) -> Result<Bufs, String> {
        let size = size as usize;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let mr = pd.allocate_mr(2 * size + 2 * INFO, access).map_err(|e| rnic_verbs::report(&e))?;
        let _ = ctx;
        Ok(Bufs { mr, size })
    }
    fn start(&self) -> usize {
        0
    }
    fn rdma(&self) -> usize {
        self.size
    }
    fn send(&self) -> usize {
        2 * self.size
    }
    fn recv(&self) -> usize {
        2 * self.size + INFO
    }
    /// Writes `struct rping_rdma_info` for the buffer at `off` into the send slot.
    fn advertise(&self, off: usize) -> Result<(), String> {
        let mut info = [0u8; INFO];
        info[..8].copy_from_slice(&(self.mr.addr() + off as u64).to_be_bytes());
        info[8..12].copy_from_slice(&self.mr.rkey().to_be_bytes());
        info[12..].copy_from_slice(&u32::try_from(self.size).unwrap_or(u32::MAX).to_be_bytes());
        self.mr.write(self.send(), &info).map_err(|e| rnic_verbs::report(&e))
    }
    fn received(&self) -> Result<(u64, u32, u32), String> {
        let mut b = [0u8; INFO];
        self.mr.read(self.recv(), &mut b).map_err(|e| rnic_verbs::report(&e))?;
        let addr = u64::from_be_bytes(b[..8].try_into().unwrap_or_default());
        let rkey = u32::from_be_bytes(b[8..12].try_into().unwrap_or_default());
        let size = u32::from_be_bytes(b[12..].try_into().unwrap_or_default());
        Ok((addr, rkey, size))
    }
    fn c_string(&self, off: usize) -> Result<String, String> {
        let mut b = vec![0u8; self.size];
        self.mr.read(off, &mut b).map_err(|e| rnic_verbs::report(&e))?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Ok(String::from_utf8_lossy(&b[..end]).into_owned())
    }
}

/// rping's ping text: `rdma-ping-N: ` and letters from `start` rotating through 'A'..='z',
/// NUL-terminated at the buffer's end.
pub fn ping_text(ping: u64, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{ping}: ").into_bytes();
    b.truncate(size);
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    if let Some(last) = b.last_mut() {
        *last = 0;
    }
    b
}

/// Waits for the completions of `want` (opcode) on `cq`, failing on an error status.
fn wait_for(cq: &CompletionQueue, want: &[WcOpcode], debug: bool) -> Result<(), String> {
    let mut left: Vec<WcOpcode> = want.to_vec();
    while !left.is_empty() {
        let wc = cq.wait(1, WAIT).map_err(|e| format!("waiting for {left:?}: {}", e.report()))?[0];
        if wc.status != WcStatus::Success {
            return Err(format!("cq completion failed status {} ({})", wc.status as u32, wc.status));
        }
        if debug {
            eprintln!("rping: completion {} {}", wc.opcode.name(), wc.byte_len);
        }
        if let Some(i) = left.iter().position(|&o| o == wc.opcode) {
            left.remove(i);
        }
    }
    Ok(())
}

fn post_recv(conn: &rnic_verbs::QueuePair, b: &Bufs) -> Result<(), String> {
    conn.post_recv(&RecvWr { wr_id: 1, sg_list: vec![b.mr.sge(b.recv(), INFO_LEN)] })
        .map_err(|e| rnic_verbs::report(&e))
}

fn post_info_send(conn: &Connection, b: &Bufs) -> Result<(), String> {
    conn.qp.post_send(&SendWr::send(2, vec![b.mr.sge(b.send(), INFO_LEN)])).map_err(|e| rnic_verbs::report(&e))
}

fn client(a: &Args) -> Result<(), String> {
    let local = match (a.source, a.addr) {
        (Some(s), _) => s,
        (None, IpAddr::V4(v)) if v.is_loopback() => IpAddr::from([127, 0, 0, 2]),
        (None, _) => return Err("-I ADDR: give this host's rnic address (the server is not on loopback)".into()),
    };
    let ctx = Context::open_at("rnic0", local).map_err(|e| rnic_verbs::report(&e))?;
    let (pd, cq) =
        (ctx.alloc_pd().map_err(|e| rnic_verbs::report(&e))?, ctx.create_cq(16).map_err(|e| rnic_verbs::report(&e))?);
    let b = Bufs::new(&ctx, &pd, a.size)?;
    let access = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let mtu = rnic_verbs::PathMtu::from_bytes(a.mtu).ok_or_else(|| format!("--mtu {}: not 256 .. 4096", a.mtu))?;
    let qp = pd
        .qp_builder(&cq, &cq)
        .access(access)
        .mtu(mtu)
        .max_rd_atomic(1)
        .max_dest_rd_atomic(1)
        .build()
        .map_err(|e| rnic_verbs::report(&e))?;
    post_recv(qp.qp(), &b)?;
    let conn = ctx.cm_connect(qp, a.addr, a.port, &[], WAIT).map_err(|e| rnic_verbs::report(&e))?;
    if a.debug {
        eprintln!("rping: connected, QP {:#x}", conn.qp.qpn());
    }
    let mut start = 65u8;
    let mut ping = 0u64;
    while a.count.is_none_or(|c| ping < c) {
        let text = ping_text(ping, start, b.size);
        start = if start >= 122 { 65 } else { start + 1 };
        b.mr.write(b.start(), &text).map_err(|e| rnic_verbs::report(&e))?;
        b.mr.write(b.rdma(), &vec![0u8; b.size]).map_err(|e| rnic_verbs::report(&e))?;
        // 1. Our start buffer: the server READs it.
        b.advertise(b.start())?;
        post_info_send(&conn, &b)?;
        wait_for(&cq, &[WcOpcode::Send, WcOpcode::Recv], a.debug)?;
        post_recv(&conn.qp, &b)?;
        // 2. Our sink buffer: the server WRITEs what it read there.
        b.advertise(b.rdma())?;
        post_info_send(&conn, &b)?;
        wait_for(&cq, &[WcOpcode::Send, WcOpcode::Recv], a.debug)?;
        post_recv(&conn.qp, &b)?;
        let mut echo = vec![0u8; b.size];
        b.mr.read(b.rdma(), &mut echo).map_err(|e| rnic_verbs::report(&e))?;
        if a.validate && echo != text {
            return Err(format!("data mismatch in ping {ping}"));
        }
        if a.verbose {
            println!("ping data: {}", b.c_string(b.rdma())?);
        }
        ping += 1;
    }
    conn.disconnect(&[]).map_err(|e| rnic_verbs::report(&e))?;
    loop {
        match ctx.cm_get_event(WAIT).map_err(|e| rnic_verbs::report(&e))? {
            CmEvent::Disconnected { .. } => break,
            _ => continue,
        }
    }
    Ok(())
}

fn server(a: &Args) -> Result<(), String> {
    let ctx = Context::open_at("rnic0", a.addr).map_err(|e| rnic_verbs::report(&e))?;
    ctx.cm_listen(a.port).map_err(|e| rnic_verbs::report(&e))?;
    loop {
        let req = loop {
            match ctx.cm_get_event(Duration::from_secs(3600)).map_err(|e| rnic_verbs::report(&e))? {
                CmEvent::ConnectRequest(r) => break r,
                _ => continue,
            }
        };
        if a.debug {
            eprintln!("rping: connect request from {}", req.src);
        }
        serve_one(a, &ctx, &req)?;
        if !a.persistent {
            return Ok(());
        }
    }
}

/// Waits for a receive, or the client's disconnect (`Ok(false)`).
fn recv_or_disconnect(ctx: &Context, cq: &CompletionQueue, conn: &Connection, a: &Args) -> Result<bool, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(3600);
    loop {
        if let Some(wc) = cq.poll_one().map_err(|e| rnic_verbs::report(&e))? {
            if wc.status != WcStatus::Success {
                // The client's disconnect flushes what we had posted.
                if ctx
                    .cm_poll_event()
                    .map_err(|e| rnic_verbs::report(&e))?
                    .is_some_and(|e| matches!(e, CmEvent::Disconnected { .. }))
                {
                    return Ok(false);
                }
                return Err(format!("cq completion failed status {} ({})", wc.status as u32, wc.status));
            }
            if a.debug {
                eprintln!("rping: completion {} {}", wc.opcode.name(), wc.byte_len);
            }
            if wc.opcode == WcOpcode::Recv {
                return Ok(true);
            }
            continue;
        }
        match ctx.cm_poll_event().map_err(|e| rnic_verbs::report(&e))? {
            Some(CmEvent::Disconnected { id, .. }) if id == conn.id => return Ok(false),
            _ => {}
        }
        if std::time::Instant::now() > deadline {
            return Err("no ping for an hour".into());
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn serve_one(a: &Args, ctx: &Context, req: &rnic_verbs::ConnectRequest) -> Result<(), String> {
    let (pd, cq) =
        (ctx.alloc_pd().map_err(|e| rnic_verbs::report(&e))?, ctx.create_cq(16).map_err(|e| rnic_verbs::report(&e))?);
    let b = Bufs::new(ctx, &pd, a.size)?;
    if a.hold > 0.0 {
        if a.debug {
            eprintln!("rping: holding the request {} s", a.hold);
        }
        std::thread::sleep(Duration::try_from_secs_f64(a.hold).map_err(|e| format!("--hold {}: {e}", a.hold))?);
    }
    let access = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let qp = pd
        .qp_builder(&cq, &cq)
        .access(access)
        .max_rd_atomic(1)
        .max_dest_rd_atomic(1)
        .build()
        .map_err(|e| rnic_verbs::report(&e))?;
    post_recv(qp.qp(), &b)?;
    let conn = ctx.cm_accept(req, qp, &[]).map_err(|e| rnic_verbs::report(&e))?;
    loop {
        // 1. The client's start buffer: READ it.
        if !recv_or_disconnect(ctx, &cq, &conn, a)? {
            break;
        }
        let (addr, rkey, size) = b.received()?;
        post_recv(&conn.qp, &b)?;
        let len = (size as usize).min(b.size);
        b.mr.write(b.rdma(), &vec![0u8; b.size]).map_err(|e| rnic_verbs::report(&e))?;
        let read = SendOp::RdmaRead { remote_addr: addr, rkey };
        conn.qp
            .post_send(&SendWr::new(3, read, vec![b.mr.sge(b.rdma(), u32::try_from(len).unwrap_or(0))]))
            .map_err(|e| rnic_verbs::report(&e))?;
        wait_for(&cq, &[WcOpcode::RdmaRead], a.debug)?;
        if a.verbose {
            println!("server ping data: {}", b.c_string(b.rdma())?);
        }
        // 2. Go ahead.
        b.advertise(b.rdma())?;
        post_info_send(&conn, &b)?;
        wait_for(&cq, &[WcOpcode::Send], a.debug)?;
        // 3. The client's sink buffer: WRITE what was read, up to its NUL.
        if !recv_or_disconnect(ctx, &cq, &conn, a)? {
            break;
        }
        let (addr, rkey, _) = b.received()?;
        post_recv(&conn.qp, &b)?;
        let text = b.c_string(b.rdma())?;
        let n = u32::try_from((text.len() + 1).min(b.size)).unwrap_or(0);
        let write = SendOp::RdmaWrite { remote_addr: addr, rkey };
        conn.qp.post_send(&SendWr::new(4, write, vec![b.mr.sge(b.rdma(), n)])).map_err(|e| rnic_verbs::report(&e))?;
        wait_for(&cq, &[WcOpcode::RdmaWrite], a.debug)?;
        // 4. Begin again.
        post_info_send(&conn, &b)?;
        wait_for(&cq, &[WcOpcode::Send], a.debug)?;
    }
    if a.debug {
        eprintln!("rping: the client disconnected");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_text_is_rpings() {
        let t = ping_text(0, 65, 32);
        assert_eq!(&t[..], b"rdma-ping-0: ABCDEFGHIJKLMNOPQR\0");
        let t = ping_text(12, 121, 20);
        assert_eq!(&t[..], b"rdma-ping-12: yzABC\0");
    }
}
