//! The out-of-band control channel of `rnic perf`: JSON lines over TCP between two
//! processes, or a pair of in-process channels for `--loopback`. Its own format (not
//! perftest's): each message is one [`Msg`] serialised with serde_json on one line.

use rnic_verbs::{Endpoint, RemoteMr};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

/// The test parameters the client sends; the server adopts them (so the two sides
/// cannot disagree, which perftest checks by hand).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Test name (`write_bw`).
    pub test: String,
    /// Message sizes, in order.
    pub sizes: Vec<u64>,
    /// Iterations per QP (ignored with a duration).
    pub iters: u64,
    /// Run for this many seconds instead of `iters`.
    pub duration: Option<f64>,
    /// QPs.
    pub qps: u32,
    /// Send queue depth.
    pub tx_depth: u32,
    /// Receive queue depth.
    pub rx_depth: u32,
    /// Inline threshold.
    pub inline: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// `-m` not given: the client lowers `mtu` to its port's active MTU (and sends the
    /// result, with this false, to the server).
    #[serde(default)]
    pub mtu_auto: bool,
    /// Completion moderation.
    pub cq_mod: u32,
    /// Both sides send.
    pub bidirectional: bool,
    /// Sleep on completion events instead of polling.
    #[serde(default)]
    pub events: bool,
    /// Unreliable connected QPs (`-c UC`) instead of RC.
    #[serde(default)]
    pub uc: bool,
    /// Skip the UDP baseline (`--no-baseline`): no ratio is reported.
    #[serde(default)]
    pub no_baseline: bool,
    /// Unreliable datagram QPs (`-c UD`, SEND tests only).
    #[serde(default)]
    pub ud: bool,
    /// Interleaved rounds per size (`--rounds`): baseline, test, baseline, test, ...,
    /// baseline; each test run is compared with the better of the baselines beside it.
    #[serde(default = "one")]
    pub rounds: u32,
    /// Connect the QPs through the Communication Manager on this port (`-R`), not with
    /// the QP numbers and PSNs of the setup exchange.
    #[serde(default)]
    pub cm_port: Option<u16>,
    /// The client runs on raw Ethernet (`--netdev`): the baseline is raw frames between
    /// the two sides' interfaces, and the server must be on raw Ethernet too.
    #[serde(default)]
    pub raw: bool,
    /// The latency baseline sends what a hop of rnic sends (`--roce-shape`): a UDP GSO
    /// pair (the packet and an ACK-sized datagram) per hop, received with GRO, TOS and
    /// timestamp control messages: the kernel's cost of rnic's system calls alone.
    #[serde(default)]
    pub roce_shape: bool,
}

fn one() -> u32 {
    1
}

/// One control message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    /// Client -> server: what to run.
    Hello {
        /// Parameters.
        params: Params,
    },
    /// The side that receives the UDP baseline is listening on this port.
    UdpReady {
        /// UDP port.
        port: u16,
    },
    /// The raw-frame baseline's receiving (or answering) side listens on this MAC.
    RawReady {
        /// Its interface's MAC.
        mac: [u8; 6],
    },
    /// The UDP baseline's receiver measured this.
    UdpDone {
        /// Datagrams received.
        datagrams: u64,
        /// Seconds from the first to the last.
        secs: f64,
    },
    /// A side's QPs and memory.
    Setup {
        /// One endpoint per QP, in QP order.
        qps: Vec<Endpoint>,
        /// The side's buffer.
        mr: RemoteMr,
    },
    /// Ready for the next size.
    Ready,
    /// A side's initiator finished: work requests completed, bytes, seconds.
    Finished {
        /// Work requests completed (all QPs).
        count: u64,
        /// Seconds from first post to last completion.
        secs: f64,
    },
    /// Whether the data this side received verified.
    Verified {
        /// Verified.
        ok: bool,
        /// Why not.
        why: String,
        /// UD: messages that never arrived (a datagram the receiver had no receive
        /// posted for is dropped, as IBA says).
        #[serde(default)]
        lost: u64,
    },
    /// The other side gave up.
    Error {
        /// Why.
        why: String,
    },
}

/// One end of the control channel.
#[derive(Debug)]
pub enum Ctrl {
    /// Over TCP (two processes or hosts).
    Tcp(BufReader<TcpStream>),
    /// In process (`--loopback`).
    Local(mpsc::Sender<Msg>, mpsc::Receiver<Msg>),
}

/// How long a side waits for the other before giving up.
pub const CTRL_TIMEOUT: Duration = Duration::from_secs(120);

impl Ctrl {
    /// Two connected in-process ends.
    pub fn pair() -> (Ctrl, Ctrl) {
        let (a_tx, a_rx) = mpsc::channel();
        let (b_tx, b_rx) = mpsc::channel();
        (Ctrl::Local(a_tx, b_rx), Ctrl::Local(b_tx, a_rx))
    }

    /// Wraps a TCP stream.
    pub fn tcp(s: TcpStream) -> Result<Ctrl, String> {
        s.set_read_timeout(Some(CTRL_TIMEOUT)).map_err(|e| rnic_verbs::report(&e))?;
        s.set_nodelay(true).map_err(|e| rnic_verbs::report(&e))?;
        Ok(Ctrl::Tcp(BufReader::new(s)))
    }

    /// Sends one message.
    pub fn send(&mut self, m: &Msg) -> Result<(), String> {
        match self {
            Ctrl::Tcp(r) => {
                let mut line = serde_json::to_string(m).map_err(|e| rnic_verbs::report(&e))?;
                line.push('\n');
                r.get_mut().write_all(line.as_bytes()).map_err(|e| format!("control connection: {e}"))
            }
            Ctrl::Local(tx, _) => tx.send(m.clone()).map_err(|_| "the other side has gone".to_string()),
        }
    }

    /// Receives one message; an `Error` from the peer becomes `Err`.
    pub fn recv(&mut self) -> Result<Msg, String> {
        self.recv_within(Some(CTRL_TIMEOUT))
    }

    /// Receives one message, waiting as long as `limit` (`None`: until it comes or the
    /// other side goes away; for the end of a run, which can take as long as the run).
    fn recv_within(&mut self, limit: Option<Duration>) -> Result<Msg, String> {
        if let Ctrl::Tcp(r) = self {
            r.get_ref().set_read_timeout(limit).map_err(|e| rnic_verbs::report(&e))?;
        }
        let m = match self {
            Ctrl::Tcp(r) => {
                let mut line = String::new();
                let n = r.read_line(&mut line).map_err(|e| format!("control connection: {e}"))?;
                if n == 0 {
                    return Err("the other side closed the control connection".into());
                }
                serde_json::from_str(line.trim_end()).map_err(|e| format!("bad control message {line:?}: {e}"))?
            }
            Ctrl::Local(_, rx) => match limit {
                Some(t) => rx.recv_timeout(t).map_err(|_| "the other side has gone".to_string())?,
                None => rx.recv().map_err(|_| "the other side has gone".to_string())?,
            },
        };
        match m {
            Msg::Error { why } => Err(format!("the other side failed: {why}")),
            m => Ok(m),
        }
    }

    /// Receives a message that must be of one kind (`what` names it for the error).
    pub fn expect<T>(&mut self, what: &str, f: impl FnOnce(Msg) -> Option<T>) -> Result<T, String> {
        let m = self.recv()?;
        let shown = format!("{m:?}");
        f(m).ok_or_else(|| format!("expected {what} from the other side, got {shown}"))
    }

    /// As [`expect`](Self::expect), without a time limit: the message that ends a run
    /// comes when the run ends, however long that is (a run with 1024 QPs can take
    /// minutes); a peer that fails sends `Error` or goes away, which ends the wait.
    pub fn expect_end<T>(&mut self, what: &str, f: impl FnOnce(Msg) -> Option<T>) -> Result<T, String> {
        let m = self.recv_within(None)?;
        let shown = format!("{m:?}");
        f(m).ok_or_else(|| format!("expected {what} from the other side, got {shown}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_json_line_each() {
        let m = Msg::Finished { count: 5000, secs: 0.5 };
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"msg":"finished","count":5000,"secs":0.5}"#);
        let m = Msg::UdpReady { port: 4000 };
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"msg":"udp_ready","port":4000}"#);
        let back: Msg = serde_json::from_str(r#"{"msg":"verified","ok":false,"why":"byte 3"}"#).unwrap();
        assert_eq!(back, Msg::Verified { ok: false, why: "byte 3".into(), lost: 0 });
    }

    #[test]
    fn local_pair_carries_messages_and_errors() {
        let (mut a, mut b) = Ctrl::pair();
        a.send(&Msg::Ready).unwrap();
        assert_eq!(b.recv().unwrap(), Msg::Ready);
        b.send(&Msg::Error { why: "no memory".into() }).unwrap();
        assert_eq!(a.recv().unwrap_err(), "the other side failed: no memory");
        a.send(&Msg::Ready).unwrap();
        assert!(b.expect("setup", |m| matches!(m, Msg::Setup { .. }).then_some(())).is_err());
    }
}
