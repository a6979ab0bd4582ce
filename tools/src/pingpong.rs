//! `rnic pingpong`: ibv_rc_pingpong's protocol, options and output, and its out-of-band
//! exchange byte for byte, so that it pairs with rdma-core's own `ibv_rc_pingpong`
//! (for example on Linux soft-RoCE, see `scripts/rxe-interop.sh`).
//!
//! The server listens on TCP (port 18515 by default), the client connects. The client
//! sends `"%04x:%06x:%06x:%s"` = LID:QPN:PSN:GID (the GID as 32 hex digits, network
//! order) plus a NUL, 52 bytes in all; the server brings its QP to RTR/RTS, replies with
//! its own message, and the client ends the exchange with `"done"` and a NUL. Then the
//! client SENDs, the server answers with a SEND, `iters` times each way (ping, pong).
//!
//! As in rc_pingpong, one buffer serves both directions (each side echoes what it
//! received), and with `-c` the client marks the first byte of every 4 KiB page with 0
//! (the rest is 0x7b), which is what the server checks.
//!
//! Where rnic differs: the GID is always sent (a RoCE device needs one; rnic devices
//! have one, index 0), and a peer that sends an all-zero GID (rc_pingpong without `-g`)
//! is reached at the address its TCP connection came from. `-c` checks every received
//! message in full on both sides, and bad data exits 1. `-e` sleeps on a completion
//! channel exactly as rc_pingpong does (arm, sleep, ack, poll).
//!
//! `--ud` is ibv_ud_pingpong: the same exchange with a UD QP's QPN and PSN, Q_Key
//! 0x11111111, an address handle for the peer's GID, receive buffers of 40 (GRH) + size
//! bytes, sends from offset 40, default size 2048, which must fit the port MTU (`-m`).

use rnic_verbs::{
    AccessFlags, CompChannel, CompletionQueue, Context, Endpoint, Gid, PathMtu, PreparedQp, QpType, QueuePair, RecvWr,
    SendWr, WcStatus, WorkCompletion, GRH_LEN,
};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `rnic pingpong` (ibv_rc_pingpong's option letters and defaults).
/// Numbers take C's forms, as rc_pingpong's `strtoul(.., 0)` does: `4096`, `0x1000`, `010000`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The server to connect to; without it, act as the server.
    pub server: Option<String>,
    /// Listen on / connect to this TCP port (the out-of-band exchange).
    #[arg(short = 'p', long = "port", default_value = "18515", value_parser = c_number::<u16>)]
    pub port: u16,
    /// Device name (with --ip: the name given to the device opened at that address).
    #[arg(short = 'd', long = "ib-dev", default_value = "rnic0")]
    pub dev: String,
    /// Port of the device (rnic devices have one port, 1).
    #[arg(short = 'i', long = "ib-port", default_value = "1", value_parser = c_number::<u8>)]
    pub ib_port: u8,
    /// Size of message to exchange (default 4096; 2048 with --ud).
    #[arg(short = 's', long = "size", value_parser = c_number::<u32>)]
    pub size: Option<u32>,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = c_number::<u32>)]
    pub mtu: u32,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value = "500", value_parser = c_number::<u32>)]
    pub rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", default_value = "1000", value_parser = c_number::<u32>)]
    pub iters: u32,
    /// Service level (0..=15; on RoCE it selects a priority, which rnic does not model).
    #[arg(short = 'l', long = "sl", default_value = "0", value_parser = c_number::<u8>)]
    pub sl: u8,
    /// Sleep on CQ events (a completion channel) instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local port GID index: 1, the RoCE v2 GID of the device's address (as rxe's
    /// `::ffff:a.b.c.d` at index 1); 0 is the link-local GID, which carries no traffic here.
    #[arg(short = 'g', long = "gid-idx", value_parser = c_number::<u32>)]
    pub gid_idx: Option<u32>,
    /// Validate the received buffer (rc_pingpong's page pattern).
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Unreliable Datagram, as ibv_ud_pingpong (Q_Key 0x11111111).
    #[arg(long = "ud")]
    pub ud: bool,
    /// Local address of the device (instead of looking the name up in RNIC_DEVICES).
    #[arg(long)]
    pub ip: Option<IpAddr>,
    /// Raw Ethernet: run the device on this network interface (whole frames through an
    /// AF_PACKET socket; needs CAP_NET_RAW) at --ip, an address the host does not own.
    #[arg(long, requires = "ip")]
    pub netdev: Option<String>,
    /// Raw Ethernet: tag the frames with this 802.1Q VLAN ID (and take only that VLAN's).
    #[arg(long, requires = "netdev")]
    pub vlan: Option<u16>,
    /// At the end, print the device's non-zero counters (rxe's hw_counters names).
    #[arg(long)]
    pub counters: bool,
}

/// Parses a number as C's `strtoul(s, NULL, 0)` reads it (`0x` hex, leading `0` octal,
/// else decimal), but whole: trailing characters are an error, not ignored.
pub fn c_number<T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    let t = s.trim();
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    let v = u64::from_str_radix(digits, radix).map_err(|_| format!("{s:?} is not a number"))?;
    T::try_from(v).map_err(|_| format!("{s} is out of range"))
}

/// ibv_ud_pingpong's Q_Key.
pub const UD_QKEY: u32 = 0x1111_1111;
/// What rc_pingpong's `sysconf(_SC_PAGESIZE)` is on the machines it runs on.
const PAGE: usize = 4096;
/// The byte rc_pingpong fills its buffer with.
const FILL: u8 = 0x7b;
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// With no completion for this long, the run fails (rc_pingpong would wait forever).
const IDLE: Duration = Duration::from_secs(30);

/// One side's address in the exchange (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID.
    pub gid: Gid,
}

/// Length of the message: `sizeof "0000:000000:000000:00000000000000000000000000000000"`.
pub const MSG_LEN: usize = 52;

impl Dest {
    /// The 52-byte message: `"%04x:%06x:%06x:%s"` plus a NUL.
    pub fn to_wire(self) -> [u8; MSG_LEN] {
        let text = format!("{:04x}:{:06x}:{:06x}:{}", self.lid, self.qpn, self.psn, self.gid.to_wire_hex());
        let mut m = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        m[..n].copy_from_slice(&text.as_bytes()[..n]);
        m
    }

    /// Parses a message as rc_pingpong's `sscanf("%x:%x:%x:%s")` does, but strictly:
    /// QPN and PSN must fit 24 bits and the GID must be 32 hex digits.
    pub fn from_wire(msg: &[u8]) -> Option<Dest> {
        let text = std::str::from_utf8(msg.split(|b| *b == 0).next()?).ok()?;
        let mut it = text.split(':');
        let mut hex = |max: u32| u32::from_str_radix(it.next()?, 16).ok().filter(|v| *v <= max);
        let lid = u16::try_from(hex(0xffff)?).ok()?;
        let qpn = hex(0xff_ffff)?;
        let psn = hex(0xff_ffff)?;
        let gid = Gid::from_wire_hex(it.next()?)?;
        it.next().is_none().then_some(Dest { lid, qpn, psn, gid })
    }

    /// The line rc_pingpong prints (`who` is "local address: " or "remote address:").
    pub fn line(self, who: &str) -> String {
        format!("  {who} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}", self.lid, self.qpn, self.psn, self.gid)
    }
}

/// The server's half of the exchange on an accepted connection: read the client's
/// address, `connect` to it (rc_pingpong moves its QP to RTR/RTS before replying),
/// reply with `mine`, read `"done"`. Returns the client's address as sent.
pub fn server_exchange(
    s: &mut (impl Read + Write),
    mine: &Dest,
    connect: impl FnOnce(&Dest) -> Result<(), String>,
) -> Result<Dest, String> {
    let mut buf = [0u8; MSG_LEN];
    s.read_exact(&mut buf).map_err(|e| format!("Couldn't read remote address: {e}"))?;
    let remote = Dest::from_wire(&buf)
        .ok_or_else(|| format!("malformed address message from the client: {:?}", String::from_utf8_lossy(&buf)))?;
    connect(&remote)?;
    s.write_all(&mine.to_wire()).map_err(|e| format!("Couldn't send local address: {e}"))?;
    let mut done = [0u8; 5];
    s.read_exact(&mut done).map_err(|e| format!("Couldn't read \"done\": {e}"))?;
    if &done != b"done\0" {
        return Err(format!("expected \"done\" from the client, got {:?}", String::from_utf8_lossy(&done)));
    }
    Ok(remote)
}

/// The client's half: send `mine`, read the server's address, send `"done"` + NUL.
pub fn client_exchange(s: &mut (impl Read + Write), mine: &Dest) -> Result<Dest, String> {
    s.write_all(&mine.to_wire()).map_err(|e| format!("Couldn't send local address: {e}"))?;
    let mut buf = [0u8; MSG_LEN];
    s.read_exact(&mut buf).map_err(|e| format!("Couldn't read remote address: {e}"))?;
    let remote = Dest::from_wire(&buf)
        .ok_or_else(|| format!("malformed address message from the server: {:?}", String::from_utf8_lossy(&buf)))?;
    s.write_all(b"done\0").map_err(|e| format!("Couldn't write \"done\": {e}"))?;
    Ok(remote)
}

/// The buffer rc_pingpong's client sends with `-c`: 0x7b, and 0 at every page start.
pub fn chk_pattern(size: usize) -> Vec<u8> {
    (0..size).map(|i| if i % PAGE == 0 { 0 } else { FILL }).collect()
}

/// Runs pingpong; 0 on success.
pub fn run(args: &Args) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rnic pingpong: {e}");
            ExitCode::from(1)
        }
    }
}

const NO_LINK_LOCAL: &str = "-g 0: GID 0 is the device's link-local GID (fe80::), which the UDP transport \
     cannot send from; use -g 1, the address's RoCEv2 GID, as with rxe (or --netdev: the raw-Ethernet \
     transport can)";

/// Checks the options as rc_pingpong does (and what rnic devices can do).
fn validate(a: &Args) -> Result<PathMtu, String> {
    if a.ib_port != 1 {
        return Err(format!("-i {}: rnic devices have one port, 1", a.ib_port));
    }
    if a.sl > 15 {
        return Err(format!("-l {}: service levels are 0..=15", a.sl));
    }
    match a.gid_idx {
        None | Some(1) => {}
        // The raw-Ethernet transport and hardware devices carry link-local traffic.
        // (A device opened by name is checked once it is open.)
        Some(0) if a.netdev.is_some() || a.ip.is_none() => {}
        Some(0) => return Err(NO_LINK_LOCAL.into()),
        Some(g) => return Err(format!("can't read sgid of index {g} (rnic devices have GIDs 0 and 1)")),
    }
    if a.rx_depth == 0 {
        return Err("-r 0: at least one receive must be posted".into());
    }
    PathMtu::from_bytes(a.mtu).ok_or_else(|| format!("-m {}: not 256, 512, 1024, 2048 or 4096", a.mtu))
}

fn run_inner(a: &Args) -> Result<(), String> {
    let mtu = validate(a)?;
    // ibv_ud_pingpong: default size 2048, and a datagram is one packet: it must fit the
    // port MTU (with --ud, -m stands for the port's active MTU).
    let size = a.size.unwrap_or(if a.ud { 2048 } else { 4096 });
    if a.ud && size > a.mtu {
        return Err(format!("Requested size larger than port MTU ({} > {})", size, a.mtu));
    }
    let size = usize::try_from(size).map_err(|_| "-s: too large")?;
    let ctx = match a.ip {
        Some(ip) => Context::open_with(rnic_verbs::DeviceConfig {
            netdev: a.netdev.clone(),
            vlan: a.vlan,
            ..rnic_verbs::DeviceConfig::new(&a.dev, ip)
        }),
        None => Context::open(&a.dev),
    }
    .map_err(|e| rnic_verbs::report(&e))?;
    let result = run_on(a, &ctx, mtu, size);
    if a.counters {
        let c: Vec<String> =
            ctx.counters().into_iter().filter(|(_, v)| *v != 0).map(|(n, v)| format!("{n}={v}")).collect();
        println!("counters: {}", c.join(" "));
    }
    result
}

fn run_on(a: &Args, ctx: &Context, mtu: PathMtu, size: usize) -> Result<(), String> {
    let pd = ctx.alloc_pd().map_err(|e| rnic_verbs::report(&e))?;
    let channel = if a.events { Some(ctx.create_comp_channel().map_err(|e| rnic_verbs::report(&e))?) } else { None };
    let cq = match &channel {
        Some(ch) => ctx.create_cq_with_channel(a.rx_depth as usize + 1, ch),
        None => ctx.create_cq(a.rx_depth as usize + 1),
    }
    .map_err(|e| rnic_verbs::report(&e))?;
    // UD (ibv_ud_pingpong): receives land at 0 with the 40-byte GRH area first, sends
    // go from UD_GRH_LEN, so the payload sits at the same place both ways (an echo).
    let at = if a.ud { GRH_LEN } else { 0 };
    let mr = pd.allocate_mr((at + size).max(1), AccessFlags::LOCAL_WRITE).map_err(|e| rnic_verbs::report(&e))?;
    mr.write(at, &vec![FILL; size]).map_err(|e| rnic_verbs::report(&e))?;
    let cap = rnic_verbs::QpCap {
        max_send_wr: 1,
        max_recv_wr: a.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    // rc_pingpong's pp_connect_ctx: timeout 14, retry_cnt 7, rnr_retry 7, min_rnr_timer 12,
    // max_rd_atomic and max_dest_rd_atomic 1. ud_pingpong: Q_Key 0x11111111.
    let qp_type = if a.ud { QpType::Ud } else { QpType::Rc };
    let prepared = pd
        .qp_builder(&cq, &cq)
        .qp_type(qp_type)
        .qkey(UD_QKEY)
        .cap(cap)
        .mtu(mtu)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .min_rnr_timer(12)
        .max_rd_atomic(1)
        .max_dest_rd_atomic(1)
        .build()
        .map_err(|e| rnic_verbs::report(&e))?;
    let len = u32::try_from(size).map_err(|_| "-s: too large")?;
    let sge = mr.sge(at, len);
    let rx_sge = mr.sge(0, len + u32::try_from(at).unwrap_or(0));
    for _ in 0..a.rx_depth {
        prepared
            .qp()
            .post_recv(&RecvWr { wr_id: RECV_WRID, sg_list: vec![rx_sge] })
            .map_err(|e| rnic_verbs::report(&e))?;
    }
    if a.events {
        cq.req_notify(false).map_err(|e| format!("Couldn't request CQ notification: {}", e.report()))?;
    }
    let ep = prepared.endpoint();
    // -g picks the GID this side announces (0: link-local, over IPv6; 1: the address's).
    let gid = match a.gid_idx {
        Some(0) if !ctx.carries_link_local() => return Err(NO_LINK_LOCAL.into()),
        Some(i) => ctx.gid(i).ok_or_else(|| format!("can't read sgid of index {i}"))?,
        None => ep.gid,
    };
    let mine = Dest { lid: 0, qpn: ep.qpn, psn: ep.psn, gid };
    println!("{}", mine.line("local address: "));

    let to_endpoint = |d: &Dest, peer: IpAddr| {
        let gid = if d.gid.0 == [0; 16] {
            // rc_pingpong without -g sends a zero GID; RoCE needs one: use the address
            // the out-of-band connection came from.
            eprintln!("rnic pingpong: the peer sent no GID (run it with -g); using its TCP address {peer}");
            Gid::from_ip(peer)
        } else {
            d.gid
        };
        Endpoint { qpn: d.qpn, gid, psn: d.psn }
    };
    let client = a.server.is_some();
    // RC: connect to the peer (INIT -> RTR -> RTS). UD: RTS on its own, and an address
    // handle for the peer's GID, as ud_pingpong's pp_connect_ctx does.
    let mut ud_dest = None;
    let mut bring_up = |prepared: PreparedQp, ep: &Endpoint| -> Result<QueuePair, String> {
        if a.ud {
            let ah = pd.create_ah(ep.gid).map_err(|e| rnic_verbs::report(&e))?;
            ud_dest = Some(ah.dest(ep.qpn, UD_QKEY));
            prepared.activate().map_err(|e| rnic_verbs::report(&e))
        } else {
            prepared.connect(ep).map_err(|e| rnic_verbs::report(&e))
        }
    };
    let (qp, remote) = match &a.server {
        None => {
            let l = TcpListener::bind(("0.0.0.0", a.port))
                .map_err(|e| format!("Couldn't listen to port {}: {e}", a.port))?;
            let (mut s, peer) = l.accept().map_err(|e| format!("accept() failed: {e}"))?;
            drop(l);
            let mut qp = None;
            let remote = server_exchange(&mut s, &mine, |d| {
                qp = Some(bring_up(prepared, &to_endpoint(d, peer.ip()))?);
                Ok(())
            })?;
            (qp.ok_or("the QP was not connected")?, remote)
        }
        Some(host) => {
            let (mut s, peer) = connect_retry(host, a.port)?;
            let remote = client_exchange(&mut s, &mine)?;
            (bring_up(prepared, &to_endpoint(&remote, peer.ip()))?, remote)
        }
    };
    println!("{}", remote.line("remote address:"));

    let expect = a.chk.then(|| chk_pattern(size));
    if client && a.chk {
        mr.write(at, &chk_pattern(size)).map_err(|e| rnic_verbs::report(&e))?;
    }
    let wr = match ud_dest {
        Some(d) => SendWr::send(SEND_WRID, vec![sge]).to(d),
        None => SendWr::send(SEND_WRID, vec![sge]),
    };
    let post_send = |qp: &QueuePair| qp.post_send(&wr).map_err(|e| rnic_verbs::report(&e));
    // rc_pingpong's `pending`: the next SEND goes once the last one completed and the
    // peer's message arrived.
    let mut pending = RECV_WRID;
    if client {
        post_send(&qp)?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let (mut scnt, mut rcnt) = (0u32, 0u32);
    let mut got = Vec::with_capacity(2);
    let mut num_cq_events = 0;
    while rcnt < a.iters || scnt < a.iters {
        next_completions(ctx, &cq, channel.as_ref(), &mut num_cq_events, &mut got)?;
        for wc in got.drain(..) {
            if wc.status != WcStatus::Success {
                return Err(format!("Failed status {} for wr_id {}", wc.status, wc.wr_id));
            }
            match wc.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    qp.post_recv(&RecvWr { wr_id: RECV_WRID, sg_list: vec![rx_sge] })
                        .map_err(|e| rnic_verbs::report(&e))?;
                    rcnt += 1;
                    if let Some(expect) = &expect {
                        check_received(&mr, at, expect, rcnt)?;
                    }
                }
                other => return Err(format!("Completion for unknown wr_id {other}")),
            }
            pending &= !wc.wr_id;
            if scnt < a.iters && pending == 0 {
                post_send(&qp)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    cq.ack_events(num_cq_events).map_err(|e| rnic_verbs::report(&e))?;
    let bytes = 2 * u64::try_from(size).unwrap_or(u64::MAX) * u64::from(a.iters);
    for line in result_lines(bytes, a.iters, usec) {
        println!("{line}");
    }
    Ok(())
}

/// rc_pingpong's two result lines, from the bytes moved (both ways), the iterations
/// and the elapsed microseconds.
pub fn result_lines(bytes: u64, iters: u32, usec: f64) -> [String; 2] {
    #[allow(clippy::cast_precision_loss)] // a byte count far below 2^53 in any real run
    let b = bytes as f64;
    [
        format!("{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec", usec / 1e6, b * 8.0 / usec),
        format!("{iters} iters in {:.2} seconds = {:.2} usec/iter", usec / 1e6, usec / f64::from(iters)),
    ]
}

/// Up to two completions (rc_pingpong polls two at a time): busy polling, or with a
/// channel rc_pingpong's event loop: sleep for the CQ's event, re-arm, then poll once
/// (which may find nothing: the completion that raised the event may have been taken
/// by the previous poll).
///
/// A busy poll drives the device itself between polls (`Context::progress`): a spinning
/// poller and the device's progress thread would otherwise share a 2-CPU machine with the
/// peer's pair and hand off by the scheduler's time slice (about 12 ms per iteration
/// measured, against tens of microseconds this way).
fn next_completions(
    ctx: &Context,
    cq: &CompletionQueue,
    channel: Option<&CompChannel>,
    num_cq_events: &mut u32,
    out: &mut Vec<WorkCompletion>,
) -> Result<(), String> {
    let blank = WorkCompletion::new(0, WcStatus::Success, rnic_verbs::WcOpcode::Send, 0);
    let mut wc = [blank; 2];
    if let Some(ch) = channel {
        ch.get_cq_event(IDLE).map_err(|e| format!("Failed to get cq_event: {}", e.report()))?;
        *num_cq_events += 1;
        cq.req_notify(false).map_err(|e| format!("Couldn't request CQ notification: {}", e.report()))?;
        let n = cq.poll(&mut wc).map_err(|e| rnic_verbs::report(&e))?;
        out.extend(wc.into_iter().take(n));
        return Ok(());
    }
    let since = Instant::now();
    loop {
        let n = cq.poll(&mut wc).map_err(|e| rnic_verbs::report(&e))?;
        if n > 0 {
            out.extend(wc.into_iter().take(n));
            return Ok(());
        }
        if since.elapsed() > IDLE {
            return Err(format!("no completion for {} s", IDLE.as_secs()));
        }
        if !ctx.progress() {
            std::hint::spin_loop();
        }
    }
}

fn check_received(mr: &rnic_verbs::MemoryRegion, at: usize, expect: &[u8], iter: u32) -> Result<(), String> {
    let mut got = vec![0u8; expect.len()];
    mr.read(at, &mut got).map_err(|e| rnic_verbs::report(&e))?;
    match got.iter().zip(expect).position(|(g, e)| g != e) {
        None => Ok(()),
        Some(at) => Err(format!(
            "invalid data in page {} (byte {at} of message {iter} is 0x{:02x}, expected 0x{:02x}; \
             with -c both sides expect the client's rc_pingpong -c pattern)",
            at / PAGE,
            got[at],
            expect[at]
        )),
    }
}

fn connect_retry(host: &str, port: u16) -> Result<(TcpStream, SocketAddr), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let addrs: Vec<SocketAddr> =
            (host, port).to_socket_addrs().map_err(|e| format!("{e} for {host}:{port}"))?.collect();
        let last = match TcpStream::connect(&addrs[..]) {
            Ok(s) => {
                let peer = s.peer_addr().map_err(|e| rnic_verbs::report(&e))?;
                return Ok((s, peer));
            }
            Err(e) => e,
        };
        if Instant::now() > deadline {
            return Err(format!("Couldn't connect to {host}:{port}: {last}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        a: Args,
    }

    fn parse(args: &[&str]) -> Result<Args, String> {
        Cli::try_parse_from(std::iter::once("pingpong").chain(args.iter().copied()))
            .map(|c| c.a)
            .map_err(|e| rnic_verbs::report(&e))
    }

    #[test]
    fn out_of_band_message_is_byte_exact() {
        // shared/rxe-lab README: the guest at 10.77.0.12 with QPN 0x11 and PSN 0xb4532e.
        let gid = Gid::from_ip("10.77.0.12".parse().unwrap());
        let d = Dest { lid: 0, qpn: 0x11, psn: 0xb4532e, gid };
        let m = d.to_wire();
        assert_eq!(&m, b"0000:000011:b4532e:00000000000000000000ffff0a4d000c\0");
        assert_eq!(Dest::from_wire(&m), Some(d));
        // Every field at its width, zero-padded; the GID in network order.
        let d =
            Dest { lid: 0xbeef, qpn: 0xabcdef, psn: 1, gid: Gid(*b"\xfe\x80\0\0\0\0\0\0\x50\x54\0\xff\xfe\x77\0\x0b") };
        assert_eq!(&d.to_wire(), b"beef:abcdef:000001:fe80000000000000505400fffe77000b\0");
        assert_eq!(Dest::from_wire(&d.to_wire()), Some(d));
        // rc_pingpong without -g: a zero GID.
        let z = Dest { lid: 0, qpn: 0x11, psn: 0, gid: Gid([0; 16]) };
        assert_eq!(&z.to_wire(), b"0000:000011:000000:00000000000000000000000000000000\0");
    }

    #[test]
    fn malformed_messages_are_refused() {
        assert_eq!(Dest::from_wire(b"0000:000011:b4532e:zz"), None);
        assert_eq!(Dest::from_wire(b"0000:1000000:b4532e:00000000000000000000ffff0a4d000c\0"), None);
        assert_eq!(Dest::from_wire(b"0000:000011:1000000:00000000000000000000ffff0a4d000c\0"), None);
        assert_eq!(Dest::from_wire(b"10000:000011:b4532e:00000000000000000000ffff0a4d000c\0"), None);
        assert_eq!(Dest::from_wire(b"0000:000011:b4532e:00000000000000000000ffff0a4d000c:1\0"), None);
        assert_eq!(Dest::from_wire(b"\xff\xfe"), None);
        assert_eq!(Dest::from_wire(b""), None);
    }

    /// Both halves of the exchange against a scripted peer: exactly 52 + 52 + 5 bytes,
    /// in rc_pingpong's order, and the server connects before it replies.
    #[test]
    fn exchange_order_and_bytes() {
        struct Script {
            input: std::io::Cursor<Vec<u8>>,
            output: Vec<u8>,
        }
        impl Read for Script {
            fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                self.input.read(b)
            }
        }
        impl Write for Script {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.output.write(b)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let gid = |ip: &str| Gid::from_ip(ip.parse().unwrap());
        let srv = Dest { lid: 0, qpn: 0x11, psn: 0x123456, gid: gid("10.77.0.1") };
        let cli = Dest { lid: 0, qpn: 0x12, psn: 0xabcdef, gid: gid("10.77.0.11") };

        let mut input = cli.to_wire().to_vec();
        input.extend_from_slice(b"done\0");
        let mut s = Script { input: std::io::Cursor::new(input), output: Vec::new() };
        let mut connected = None;
        let got = server_exchange(&mut s, &srv, |d| {
            connected = Some(*d);
            Ok(())
        })
        .unwrap();
        assert_eq!((got, connected), (cli, Some(cli)));
        assert_eq!(s.output, b"0000:000011:123456:00000000000000000000ffff0a4d0001\0");

        let mut s = Script { input: std::io::Cursor::new(srv.to_wire().to_vec()), output: Vec::new() };
        assert_eq!(client_exchange(&mut s, &cli).unwrap(), srv);
        assert_eq!(s.output, b"0000:000012:abcdef:00000000000000000000ffff0a4d000b\0done\0");

        // A client that hangs up instead of "done" is an error, not a hang or a panic.
        let mut s = Script { input: std::io::Cursor::new(cli.to_wire().to_vec()), output: Vec::new() };
        assert!(server_exchange(&mut s, &srv, |_| Ok(())).unwrap_err().contains("done"));
    }

    #[test]
    fn options_mean_what_rc_pingpong_means() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.server, a.port, a.dev.as_str(), a.ib_port), (None, 18515, "rnic0", 1));
        assert_eq!((a.size, a.mtu, a.rx_depth, a.iters, a.sl), (None, 1024, 500, 1000, 0));
        assert!(!a.events && !a.chk && !a.ud && a.gid_idx.is_none());

        let a = parse(&["-p", "0x4853", "-d", "rnic1", "-i", "1", "-s", "64", "-m", "4096", "-r", "010"]).unwrap();
        assert_eq!((a.port, a.dev.as_str(), a.size, a.mtu, a.rx_depth), (0x4853, "rnic1", Some(64), 4096, 8));
        let a = parse(&["10.77.0.11", "-n", "5", "-l", "3", "-e", "-g", "1", "-c"]).unwrap();
        assert_eq!(
            (a.server.as_deref(), a.iters, a.sl, a.events, a.gid_idx, a.chk),
            (Some("10.77.0.11"), 5, 3, true, Some(1), true)
        );
        let a = parse(&["--port=18516", "--ib-dev=x", "--size=8", "--mtu=256", "--rx-depth=4", "--iters=2"]).unwrap();
        assert_eq!((a.port, a.dev.as_str(), a.size, a.mtu, a.rx_depth, a.iters), (18516, "x", Some(8), 256, 4, 2));
        let a = parse(&["--sl=1", "--events", "--gid-idx=0", "--chk", "--ud", "--ip", "10.77.0.1", "host"]).unwrap();
        assert!(a.events && a.chk && a.ud && a.ip == Some("10.77.0.1".parse().unwrap()));

        assert!(parse(&["-p", "65536"]).is_err());
        assert!(parse(&["-s", "12k"]).is_err());
        assert!(parse(&["a", "b"]).is_err());
        assert!(parse(&["-x"]).is_err());
    }

    #[test]
    fn option_values_are_checked_like_rc_pingpong() {
        let v = |args: &[&str]| validate(&parse(args).unwrap());
        assert_eq!(v(&[]), Ok(PathMtu::Mtu1024));
        assert_eq!(v(&["-m", "4096"]), Ok(PathMtu::Mtu4096));
        assert!(v(&["-m", "1000"]).unwrap_err().contains("-m 1000"));
        assert!(v(&["-i", "2"]).unwrap_err().contains("one port"));
        assert_eq!(v(&["-g", "1"]), Ok(PathMtu::Mtu1024), "index 1: the address's RoCEv2 GID, as rxe's");
        assert!(v(&["-g", "0", "--ip", "127.0.0.1"]).unwrap_err().contains("link-local"));
        assert!(v(&["-g", "0", "--ip", "10.0.0.1", "--netdev", "veth0"]).is_ok(), "raw Ethernet carries GID 0");
        assert!(v(&["-g", "2"]).unwrap_err().contains("can't read sgid of index 2"));
        assert!(v(&["-l", "16"]).is_err());
        assert!(v(&["-r", "0"]).is_err());
    }

    #[test]
    fn c_numbers() {
        assert_eq!(c_number::<u32>("4096"), Ok(4096));
        assert_eq!(c_number::<u32>("0x1000"), Ok(4096));
        assert_eq!(c_number::<u32>("0X1000"), Ok(4096));
        assert_eq!(c_number::<u32>("010000"), Ok(4096));
        assert_eq!(c_number::<u32>("0"), Ok(0));
        assert!(c_number::<u8>("256").is_err());
        assert!(c_number::<u32>("08").is_err());
        assert!(c_number::<u32>("-1").is_err());
    }

    #[test]
    fn result_lines_are_rc_pingpong_s() {
        // 1000 iterations of 4096 bytes in 0.5 s.
        let [a, b] = result_lines(2 * 4096 * 1000, 1000, 500_000.0);
        assert_eq!(a, "8192000 bytes in 0.50 seconds = 131.07 Mbit/sec");
        assert_eq!(b, "1000 iters in 0.50 seconds = 500.00 usec/iter");
        let d = Dest { lid: 0, qpn: 0x11, psn: 0x0a0b0c, gid: Gid::from_ip("10.77.0.1".parse().unwrap()) };
        assert_eq!(
            d.line("local address: "),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x0a0b0c, GID ::ffff:10.77.0.1"
        );
        assert_eq!(
            d.line("remote address:"),
            "  remote address: LID 0x0000, QPN 0x000011, PSN 0x0a0b0c, GID ::ffff:10.77.0.1"
        );
    }

    #[test]
    fn chk_pattern_is_rc_pingpong_s() {
        let p = chk_pattern(8200);
        assert_eq!((p[0], p[1], p[4095], p[4096], p[4097], p[8192], p[8199]), (0, FILL, FILL, 0, FILL, 0, FILL));
        assert!(chk_pattern(0).is_empty());
    }

    #[test]
    fn ud_size_must_fit_the_port_mtu() {
        // ibv_ud_pingpong's default size, 2048, exceeds the default MTU 1024.
        let e = run_inner(&parse(&["--ud", "-m", "1024"]).unwrap()).unwrap_err();
        assert_eq!(e, "Requested size larger than port MTU (2048 > 1024)");
    }
}
