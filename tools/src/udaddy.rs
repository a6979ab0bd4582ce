//! `rnic udaddy`: rdma_cm's UD test (rdmacm-utils' `udaddy`), on rnic, speaking the same
//! protocol, so it pairs with the stock `udaddy`.
//!
//! As udaddy.c: the server listens on a port of rdma_cm's UDP port space and answers the
//! client's SIDR_REQ with its UD QP (Q_Key 0x01234567); the client sends `-C` datagrams of
//! `-S` bytes there, each a SEND with immediate data carrying its own QPN; the server
//! waits for them all, makes its reply address from the first one's GRH and QPN, and sends
//! as many back the same way; the client waits for them. Each side checks what udaddy
//! leaves unchecked: every datagram's size, and that its immediate data and source QP name
//! the peer's QP.

use rnic_verbs::WcFlags;
use rnic_verbs::{
    AccessFlags, CmEvent, CompletionQueue, Context, MemoryRegion, QpType, QueuePair, RecvWr, SendOp, SendWr, UdDest,
    WcOpcode, WcStatus, GRH_LEN, RDMA_UDP_QKEY,
};
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `rnic udaddy` (udaddy's letters; the port, fixed at 7174 in udaddy, is
/// `--port`).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Client: the server's address (without it, this is the server).
    #[arg(short = 's')]
    pub server: Option<IpAddr>,
    /// This side's device address (server: required; client: 127.0.0.2 when the server is
    /// on 127.0.0.1).
    #[arg(short = 'b')]
    pub bind: Option<IpAddr>,
    /// Datagrams each way.
    #[arg(short = 'C', default_value_t = 10)]
    pub count: u32,
    /// Bytes per datagram.
    #[arg(short = 'S', default_value_t = 100)]
    pub size: u32,
    /// Port in rdma_cm's UDP port space.
    #[arg(long, default_value_t = 7174)]
    pub port: u16,
}

const WAIT: Duration = Duration::from_secs(30);

/// Runs `rnic udaddy`.
pub fn run(a: &Args) -> ExitCode {
    let r = match a.server {
        Some(dst) => {
            println!("udaddy: starting client");
            client(a, dst)
        }
        None => {
            println!("udaddy: starting server");
            server(a)
        }
    };
    println!("test complete");
    match r {
        Ok(()) => {
            println!("return status 0");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rnic udaddy: {e}");
            println!("return status 1");
            ExitCode::from(1)
        }
    }
}

fn report(e: rnic_verbs::Error) -> String {
    rnic_verbs::report(&e)
}

/// A side's QP, CQ and one buffer slot (GRH area, then the datagram) per datagram.
struct Node {
    pd: rnic_verbs::ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
    size: usize,
    count: u32,
}

impl Node {
    fn new(ctx: &Context, a: &Args) -> Result<Node, String> {
        let mtu = ctx.query_port().map_err(report)?.active_mtu.bytes();
        if a.size > mtu {
            return Err(format!("message_size {} is larger than active mtu {mtu}", a.size));
        }
        let (size, count) = (a.size as usize, a.count.max(1));
        let pd = ctx.alloc_pd().map_err(report)?;
        let cq = ctx.create_cq(2 * count as usize).map_err(report)?;
        let slot = GRH_LEN + size;
        let mr = pd.allocate_mr(slot * count as usize, AccessFlags::LOCAL_WRITE).map_err(report)?;
        let qp = pd
            .qp_builder(&cq, &cq)
            .qp_type(QpType::Ud)
            .qkey(RDMA_UDP_QKEY)
            .build()
            .and_then(|q| q.activate())
            .map_err(report)?;
        for i in 0..count {
            let sge = mr.sge(i as usize * slot, u32::try_from(slot).map_err(|e| e.to_string())?);
            qp.post_recv(&RecvWr { wr_id: u64::from(i), sg_list: vec![sge] }).map_err(report)?;
        }
        Ok(Node { pd, cq, qp, mr, size, count })
    }

    fn slot(&self, i: u64) -> usize {
        usize::try_from(i).unwrap_or(usize::MAX).saturating_mul(GRH_LEN + self.size)
    }

    /// Waits for every datagram: each of `size` bytes, with immediate data and source QP
    /// naming the peer's QP (`peer`, or the first datagram's when `None`). Returns the
    /// peer's QPN and the first datagram's slot.
    fn receive(&self, peer: Option<u32>) -> Result<(u32, u64), String> {
        let mut got = 0;
        let mut first: Option<(u32, u64)> = None;
        while got < self.count {
            for wc in self.cq.wait(1, WAIT).map_err(report)? {
                if wc.opcode != WcOpcode::Recv {
                    continue;
                }
                if wc.status != WcStatus::Success {
                    return Err(format!("receive {}: {:?}", wc.wr_id, wc.status));
                }
                let want = peer.or(first.map(|f| f.0)).unwrap_or(wc.src_qp);
                if wc.byte_len as usize != GRH_LEN + self.size || !wc.wc_flags.contains(WcFlags::WITH_IMM) {
                    return Err(format!(
                        "datagram of {} bytes, immediate {}",
                        wc.byte_len,
                        wc.wc_flags.contains(WcFlags::WITH_IMM)
                    ));
                }
                if wc.imm_data != want || wc.src_qp != want {
                    return Err(format!(
                        "datagram from QP {:#x} naming QP {:#x}, not QP {want:#x}",
                        wc.src_qp, wc.imm_data
                    ));
                }
                first.get_or_insert((want, wc.wr_id));
                got += 1;
            }
        }
        first.ok_or_else(|| "no datagram".into())
    }

    /// Sends every datagram to `to`, each a SEND with this QP's number as immediate data,
    /// and waits for their completions.
    fn send(&self, to: UdDest) -> Result<(), String> {
        let imm = self.qp.qpn();
        for i in 0..self.count {
            let at = self.slot(u64::from(i)) + GRH_LEN;
            self.mr.write(at, &vec![b'a' + (i % 26) as u8; self.size]).map_err(report)?;
            let sge = self.mr.sge(at, u32::try_from(self.size).map_err(|e| e.to_string())?);
            let wr = SendWr::new(1000 + u64::from(i), SendOp::SendWithImm { imm }, vec![sge]).to(to);
            self.qp.post_send(&wr).map_err(report)?;
        }
        let mut done = 0;
        while done < self.count {
            for wc in self.cq.wait(1, WAIT).map_err(report)? {
                if wc.status != WcStatus::Success {
                    return Err(format!("send {}: {:?}", wc.wr_id, wc.status));
                }
                done += u32::from(wc.opcode == WcOpcode::Send);
            }
        }
        Ok(())
    }
}

fn server(a: &Args) -> Result<(), String> {
    let addr = a.bind.ok_or("-b ADDR: the server's device address")?;
    let ctx = Context::open_at("rnic0", addr).map_err(report)?;
    let node = Node::new(&ctx, a)?;
    ctx.cm_listen_ud(a.port).map_err(report)?;
    let req = loop {
        match ctx.cm_get_event(Duration::from_secs(3600)).map_err(report)? {
            CmEvent::UdRequest(r) => break r,
            other => eprintln!("udaddy: ignoring {other:?}"),
        }
    };
    ctx.cm_accept_ud(&req, &node.qp, b"").map_err(report)?;
    println!("receiving data transfers");
    let (peer, first) = node.receive(None)?;
    // udaddy's create_reply_ah: the first datagram's GRH, its immediate data as the QPN,
    // this QP's Q_Key.
    let mut grh = [0u8; GRH_LEN];
    node.mr.read(node.slot(first), &mut grh).map_err(report)?;
    let ah = node.pd.create_ah_from_grh(&grh).map_err(report)?;
    println!("sending replies");
    node.send(ah.dest(peer, RDMA_UDP_QKEY))?;
    println!("data transfers complete");
    Ok(())
}

fn client(a: &Args, dst: IpAddr) -> Result<(), String> {
    let local = match (a.bind, dst) {
        (Some(s), _) => s,
        (None, IpAddr::V4(v)) if v.is_loopback() => IpAddr::from([127, 0, 0, 2]),
        (None, _) => return Err("-b ADDR: give this host's rnic address (the server is not on loopback)".into()),
    };
    let ctx = Context::open_at("rnic0", local).map_err(report)?;
    let node = Node::new(&ctx, a)?;
    println!("udaddy: connecting");
    let remote = ctx.cm_resolve_ud(dst, a.port, b"", WAIT).map_err(report)?;
    println!("initiating data transfers");
    node.send(remote.dest())?;
    println!("receiving data transfers");
    node.receive(Some(remote.qpn))?;
    println!("data transfers complete");
    Ok(())
}
