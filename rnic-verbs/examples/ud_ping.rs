//! UD ping-pong: datagrams between two UD QPs, the way ibv_ud_pingpong does it.
//!
//! A UD QP is not connected: it is brought to RTS on its own (`activate`), each send names
//! its destination (an address handle for the peer's GID, the peer's QPN and Q_Key), and
//! every receive buffer begins with 40 bytes of GRH, which says who sent the datagram.
//!
//! One process, two devices (127.0.0.1 and 127.0.0.2 unless given):
//!     cargo run -p rnic-verbs --example ud_ping
//! Two processes, ibv_ud_pingpong's TCP exchange of `LID:QPN:PSN:GID` on port 18515:
//!     cargo run -p rnic-verbs --example ud_ping -- server 127.0.0.2
//!     cargo run -p rnic-verbs --example ud_ping -- client 127.0.0.1 127.0.0.2
//! (`server IP`, `client IP SERVER_IP`: each side opens its own device at IP.)
use rnic_verbs::*;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::Duration;

/// ibv_ud_pingpong's Q_Key.
const QKEY: u32 = 0x1111_1111;
const SIZE: usize = 1024;
const ITERS: u8 = 10;
const T: Duration = Duration::from_secs(5);

/// One side: a device, a UD QP in RTS, and a region holding a receive buffer (GRH area +
/// payload) at 0 and a send buffer at 8192.
struct Side {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    mr: MemoryRegion,
    qp: QueuePair,
    endpoint: Endpoint,
}

fn side(name: &str, ip: IpAddr) -> Result<Side> {
    let ctx = Context::open_at(name, ip)?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16)?;
    let mr = pd.allocate_mr(16384, AccessFlags::LOCAL_WRITE)?;
    let prepared = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).qkey(QKEY).build()?;
    let endpoint = prepared.endpoint();
    let qp = prepared.activate()?;
    Ok(Side { pd, cq, mr, qp, endpoint })
}

impl Side {
    fn post_recv(&self) -> Result<()> {
        self.qp.post_recv(&RecvWr {
            wr_id: 1,
            sg_list: vec![self.mr.sge(0, u32::try_from(GRH_LEN + SIZE).expect("small"))],
        })
    }

    /// Sends `data` to `to` and waits for the send completion.
    fn send(&self, to: &UdDest, data: &[u8]) -> Result<()> {
        self.mr.write(8192, data)?;
        let len = u32::try_from(data.len()).expect("short message");
        self.qp.post_send(&SendWr::send(2, vec![self.mr.sge(8192, len)]).to(*to))?;
        self.wait(WcOpcode::Send).map(|_| ())
    }

    /// Waits for a completion of `opcode`; a failed one is an error.
    fn wait(&self, opcode: WcOpcode) -> Result<WorkCompletion> {
        loop {
            let wc = self.cq.wait(1, T)?[0];
            if wc.status != WcStatus::Success {
                return Err(Error::InvalidArgument { op: "completion", why: format!("{wc}") });
            }
            if wc.opcode == opcode {
                return Ok(wc);
            }
        }
    }

    /// Waits for a datagram; returns its payload and an address handle back to its sender
    /// (from the GRH, as ibv_create_ah_from_wc does) with the sender's QPN.
    fn recv(&self) -> Result<(Vec<u8>, UdDest)> {
        let wc = self.wait(WcOpcode::Recv)?;
        let mut buf = vec![0; wc.byte_len as usize];
        self.mr.read(0, &mut buf)?;
        let back = self.pd.create_ah_from_grh(&buf[..GRH_LEN])?;
        Ok((buf.split_off(GRH_LEN), back.dest(wc.src_qp, QKEY)))
    }
}

/// The client pings, the server pongs the same bytes back to whoever sent them.
fn ping(client: &Side, server: &Endpoint) -> Result<()> {
    let ah = client.pd.create_ah(server.gid)?;
    let to = ah.dest(server.qpn, QKEY);
    for i in 0..ITERS {
        let msg: Vec<u8> = (0..SIZE).map(|k| u8::try_from(k % 251).unwrap_or(0).wrapping_add(i)).collect();
        client.post_recv()?;
        client.send(&to, &msg)?;
        let (back, from) = client.recv()?;
        assert_eq!(back, msg, "pong {i} differs");
        assert_eq!(from.remote_qpn, server.qpn);
    }
    println!("client: {ITERS} UD pings of {SIZE} bytes to QPN {:#x} at {} answered", server.qpn, server.gid);
    Ok(())
}

fn pong(server: &Side) -> Result<()> {
    for _ in 0..ITERS {
        let (data, back) = server.recv()?;
        server.post_recv()?;
        server.send(&back, &data)?;
    }
    println!("server: {ITERS} pongs sent");
    Ok(())
}

/// ibv_ud_pingpong's message: `"%04x:%06x:%06x:%s"` (LID 0 on RoCE, QPN, PSN, GID as 32 hex
/// digits) and a NUL: 52 bytes.
fn oob(ep: &Endpoint) -> Vec<u8> {
    let mut v = format!("{:04x}:{:06x}:{:06x}:{}", 0, ep.qpn, ep.psn, ep.gid.to_wire_hex()).into_bytes();
    v.push(0);
    v
}

fn parse_oob(m: &[u8; 52]) -> Endpoint {
    let s = String::from_utf8_lossy(&m[..51]);
    let f: Vec<&str> = s.split(':').collect();
    let hex = |x: &str| u32::from_str_radix(x, 16).expect("hex field");
    Endpoint { qpn: hex(f[1]), psn: hex(f[2]), gid: Gid::from_wire_hex(f[3]).expect("32 hex digits") }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ip = |i: usize, d: &str| -> IpAddr { args.get(i).map_or(d, String::as_str).parse().expect("IP address") };
    match args.first().map(String::as_str) {
        Some("server") => {
            let s = side("rnic1", ip(1, "127.0.0.2"))?;
            s.post_recv()?;
            let l = TcpListener::bind(("0.0.0.0", 18515)).expect("listen on TCP 18515");
            let (mut t, _) = l.accept().expect("accept");
            let mut m = [0u8; 52];
            t.read_exact(&mut m).expect("client's address");
            println!("server: client is {:?}", parse_oob(&m));
            t.write_all(&oob(&s.endpoint)).expect("send address");
            t.read_exact(&mut [0u8; 5]).expect("\"done\"");
            pong(&s)
        }
        Some("client") => {
            let c = side("rnic0", ip(1, "127.0.0.1"))?;
            let mut t = TcpStream::connect((ip(2, "127.0.0.2"), 18515)).expect("connect to the server");
            t.write_all(&oob(&c.endpoint)).expect("send address");
            let mut m = [0u8; 52];
            t.read_exact(&mut m).expect("server's address");
            t.write_all(b"done\0").expect("send done");
            ping(&c, &parse_oob(&m))
        }
        _ => {
            // Both sides here; the endpoints would normally cross the network out of band.
            let a = side("rnic0", ip(0, "127.0.0.1"))?;
            let b = side("rnic1", ip(1, "127.0.0.2"))?;
            b.post_recv()?;
            // B's endpoint travels to A as ibv_ud_pingpong's 52-byte message would.
            let ep_b = parse_oob(&oob(&b.endpoint).try_into().expect("52 bytes"));
            let server = std::thread::spawn(move || pong(&b));
            ping(&a, &ep_b)?;
            server.join().expect("server thread")
        }
    }
}

/// Runs the example; on failure prints the error with its causes (`Error::report`), not
/// the `Debug` form a `main` returning `Result` would print.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", e.report());
            std::process::ExitCode::FAILURE
        }
    }
}
