//! `rnic pingpong`: ibv_rc_pingpong's protocol and its out-of-band exchange, byte for byte.
//!
//! The server listens on TCP (port 18515 by default), the client connects. Each side
//! sends `"%04x:%06x:%06x:%s"` = LID:QPN:PSN:GID (the GID as 32 hex digits, network
//! order) plus a NUL, 52 bytes in all; the server replies with its own after bringing
//! its QP to RTS, and the client ends the exchange with `"done"` and a NUL. Then the
//! client SENDs, the server answers with a SEND, `iters` times (ping, pong).

use rnic_verbs::{AccessFlags, Context, Endpoint, Gid, PathMtu, RecvWr, SendWr, WcOpcode, WcStatus};
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Arguments of `rnic pingpong` (ibv_rc_pingpong's option letters).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The server to connect to; without it, act as the server.
    pub server: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Device name (ignored when --ip is given).
    #[arg(short = 'd', long = "ib-dev", default_value = "rnic0")]
    pub dev: String,
    /// Port of the device (rnic devices have one; only 1 is valid).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// Message size in bytes.
    #[arg(short = 's', long = "size", default_value_t = 4096)]
    pub size: u32,
    /// Path MTU in bytes.
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    pub mtu: u32,
    /// Receive queue depth.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Iterations.
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u32,
    /// Service level (carried for compatibility; RoCE maps it to priority).
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Sleep on completion events instead of busy polling (accepted; rnic polls).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// GID index (rnic devices have GID 0; 1 is accepted as rxe's IPv4 index).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u32>,
    /// Check the received data (ibv_rc_pingpong -c).
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Local address of the device.
    #[arg(long)]
    pub ip: Option<IpAddr>,
}

/// The 52-byte message of ibv_rc_pingpong: `"%04x:%06x:%06x:%s"` plus a NUL.
pub fn format_dest(lid: u16, qpn: u32, psn: u32, gid: &Gid) -> Vec<u8> {
    let mut v = format!("{lid:04x}:{qpn:06x}:{psn:06x}:{}", gid.to_wire_hex()).into_bytes();
    v.push(0);
    v
}

/// Parses the 52-byte message; returns LID, QPN, PSN, GID.
pub fn parse_dest(msg: &[u8]) -> Option<(u16, u32, u32, Gid)> {
    let text = std::str::from_utf8(msg.split(|b| *b == 0).next()?).ok()?;
    let mut it = text.split(':');
    let lid = u16::from_str_radix(it.next()?, 16).ok()?;
    let qpn = u32::from_str_radix(it.next()?, 16).ok()?;
    let psn = u32::from_str_radix(it.next()?, 16).ok()?;
    let gid = Gid::from_wire_hex(it.next()?)?;
    if it.next().is_some() || qpn > 0xFF_FFFF || psn > 0xFF_FFFF {
        return None;
    }
    Some((lid, qpn, psn, gid))
}

const MSG_LEN: usize = 52;

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

fn run_inner(a: &Args) -> Result<(), String> {
    if a.ib_port != 1 {
        return Err(format!("-i {}: rnic devices have one port, 1", a.ib_port));
    }
    let mtu = PathMtu::from_bytes(a.mtu).ok_or_else(|| format!("-m {}: not 256, 512, 1024, 2048 or 4096", a.mtu))?;
    let ctx = match a.ip {
        Some(ip) => Context::open_at(&a.dev, ip),
        None => Context::open(&a.dev),
    }
    .map_err(|e| e.to_string())?;
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(a.rx_depth as usize + 1).map_err(|e| e.to_string())?;
    let size = a.size as usize;
    // Two halves: what we send and what we receive (so -c can check the peer's data).
    let mr = pd.allocate_mr((size * 2).max(1), AccessFlags::LOCAL_WRITE).map_err(|e| e.to_string())?;
    let cap = rnic_verbs::QpCap {
        max_send_wr: 1,
        max_recv_wr: a.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let prepared = pd.qp_builder(&cq, &cq).cap(cap).mtu(mtu).build().map_err(|e| e.to_string())?;
    let mine = prepared.endpoint();
    let rx_sge = mr.sge(size, a.size);
    let tx_sge = mr.sge(0, a.size);
    let recv = |id: u64| RecvWr { wr_id: id, sg_list: vec![rx_sge] };
    for _ in 0..a.rx_depth {
        prepared.qp().post_recv(&recv(1)).map_err(|e| e.to_string())?;
    }
    println!("  local address:  LID 0x0000, QPN 0x{:06x}, PSN 0x{:06x}, GID {}", mine.qpn, mine.psn, mine.gid);
    let (qp, remote) = match &a.server {
        None => {
            let l = TcpListener::bind(("0.0.0.0", a.port)).map_err(|e| format!("listen on TCP {}: {e}", a.port))?;
            let (mut s, _) = l.accept().map_err(|e| e.to_string())?;
            let mut buf = [0u8; MSG_LEN];
            s.read_exact(&mut buf).map_err(|e| format!("reading the client's address: {e}"))?;
            let (_, qpn, psn, gid) = parse_dest(&buf).ok_or("malformed address message from the client")?;
            let remote = Endpoint { qpn, gid, psn };
            let qp = prepared.connect(&remote).map_err(|e| e.to_string())?;
            s.write_all(&format_dest(0, mine.qpn, mine.psn, &mine.gid)).map_err(|e| e.to_string())?;
            let mut done = [0u8; 5];
            s.read_exact(&mut done).map_err(|e| format!("reading \"done\": {e}"))?;
            (qp, remote)
        }
        Some(host) => {
            let mut s = connect_retry(host, a.port)?;
            s.write_all(&format_dest(0, mine.qpn, mine.psn, &mine.gid)).map_err(|e| e.to_string())?;
            let mut buf = [0u8; MSG_LEN];
            s.read_exact(&mut buf).map_err(|e| format!("reading the server's address: {e}"))?;
            let (_, qpn, psn, gid) = parse_dest(&buf).ok_or("malformed address message from the server")?;
            let remote = Endpoint { qpn, gid, psn };
            let qp = prepared.connect(&remote).map_err(|e| e.to_string())?;
            s.write_all(b"done\0").map_err(|e| e.to_string())?;
            (qp, remote)
        }
    };
    println!("  remote address: LID 0x0000, QPN 0x{:06x}, PSN 0x{:06x}, GID {}", remote.qpn, remote.psn, remote.gid);
    let client = a.server.is_some();
    // Fill the send half with a pattern the peer can check (-c).
    let fill: Vec<u8> = (0..=250u8).cycle().take(size).collect();
    mr.write(0, &fill).map_err(|e| e.to_string())?;
    let start = Instant::now();
    let (mut sent, mut rcvd) = (0u32, 0u32);
    let mut send_pending = false;
    if client {
        qp.post_send(&SendWr::send(2, vec![tx_sge])).map_err(|e| e.to_string())?;
        send_pending = true;
    }
    let deadline = Duration::from_secs(30);
    while sent < a.iters || rcvd < a.iters {
        let Some(wc) = cq.poll_one() else {
            if start.elapsed() > deadline + Duration::from_millis(u64::from(a.iters)) {
                return Err(format!("timed out after {sent} sends and {rcvd} receives"));
            }
            std::hint::spin_loop();
            continue;
        };
        if wc.status != WcStatus::Success {
            return Err(format!("Failed status {} for wr_id {}", wc.status, wc.wr_id));
        }
        match wc.opcode {
            WcOpcode::Send => {
                sent += 1;
                send_pending = false;
            }
            WcOpcode::Recv => {
                rcvd += 1;
                if a.chk {
                    let mut got = vec![0u8; size];
                    mr.read(size, &mut got).map_err(|e| e.to_string())?;
                    if got != fill {
                        return Err(format!("received data differs from the pattern (iteration {rcvd})"));
                    }
                }
                qp.post_recv(&recv(1)).map_err(|e| e.to_string())?;
            }
            _ => {}
        }
        // Ping-pong: send again once our last send completed and the peer's arrived.
        if !send_pending && sent < a.iters && rcvd >= sent + u32::from(!client) {
            qp.post_send(&SendWr::send(2, vec![tx_sge])).map_err(|e| e.to_string())?;
            send_pending = true;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = 2.0 * f64::from(a.size) * f64::from(a.iters);
    println!("{bytes:.0} bytes in {secs:.2} seconds = {:.2} Mbit/sec", bytes * 8.0 / secs / 1e6);
    println!("{} iters in {secs:.2} seconds = {:.2} usec/iter", a.iters, secs * 1e6 / f64::from(a.iters));
    Ok(())
}

fn connect_retry(host: &str, port: u16) -> Result<TcpStream, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect((host, port)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() > deadline => return Err(format!("connect to {host}:{port}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_band_message_is_byte_exact() {
        // shared/rxe-lab README: the guest at 10.77.0.12 with QPN 0x11 and PSN 0xb4532e.
        let gid = Gid::from_ip("10.77.0.12".parse().unwrap());
        let m = format_dest(0, 0x11, 0xb4532e, &gid);
        assert_eq!(m, b"0000:000011:b4532e:00000000000000000000ffff0a4d000c\0");
        assert_eq!(m.len(), 52);
        assert_eq!(parse_dest(&m), Some((0, 0x11, 0xb4532e, gid)));
        assert_eq!(parse_dest(b"0000:000011:b4532e:zz"), None);
        assert_eq!(parse_dest(b"0000:1000000:b4532e:00000000000000000000ffff0a4d000c\0"), None);
    }
}
