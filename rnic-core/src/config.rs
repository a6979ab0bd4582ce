//! What a device is opened with ([`DeviceConfig`], the environment's [`EnvSettings`]),
//! what opening it can fail with ([`DeviceError`]) and what it then runs on
//! ([`TransportInfo`]): shared by the driver ([`crate::device`], which re-exports them)
//! and its transports, so that neither imports the other's module.

use crate::engine::EngineError;
use crate::faults::{FaultHandle, Faults};
use crate::mem::MemError;
use crate::mr::MrError;
use rnic_wire::icrc::Ipv4IdPolicy;
use rnic_wire::ROCEV2_UDP_PORT;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

const DEFAULT_SPIN_US: u64 = 50;
/// Memory regions a device holds unless configured otherwise (`DeviceConfig::max_mr`).
pub(crate) const DEFAULT_MAX_MR: u32 = 1 << 16;
/// Socket buffer size asked for when the process may exceed the sysctl limits.
pub(crate) const SOCKET_BUFFER: usize = rnic_io::SOCKET_BUFFER;

/// How to open a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Name (`rnic0`).
    pub name: String,
    /// The local address the device binds (its GID is the IPv4-mapped form).
    pub ip: IpAddr,
    /// UDP port (4791 unless testing).
    pub port: u16,
    /// Pin registered memory with mlock, as a real driver does.
    pub pin_memory: bool,
    /// Write every packet sent and received to this pcap file.
    pub capture: Option<PathBuf>,
    /// Memory regions the device can hold.
    pub max_mr: u32,
    /// How long the progress and receive threads keep polling after their last piece of
    /// work before they block (spin-before-sleep: a blocked thread takes tens of
    /// microseconds to wake on another CPU). `RNIC_SPIN_US` overrides the default 50 us;
    /// zero never spins. The progress thread spins only while some CPU is idle: where the
    /// host's runnable threads outnumber the CPUs it may use, it sleeps at once.
    pub spin: Duration,
    /// Wake the progress thread at real-time priority where the process may
    /// (`CAP_SYS_NICE` or `RLIMIT_RTPRIO`): it sleeps as `SCHED_FIFO` and drops back to
    /// the normal policy after the round it woke for, so that a packet arriving while
    /// every CPU runs a busy-polling application thread is handled at once instead of at
    /// the scheduler's next tick. Measured with stock `ib_write_lat` between two
    /// processes on two CPUs (three interleaved pairs): UC's 99th percentile 1.85-1.97 ms
    /// (a tick of a 250 Hz kernel) became 44-144 us and its average 101-186 us 37-69 us;
    /// but RC's typical latency rose from 18.7 to 35 us (the woken thread preempts a
    /// program that was polling its CQ and would have taken the packet itself), while its
    /// 99th percentile fell from 0.85-0.94 ms to 0.16-0.77 ms. So it is off by default:
    /// `RNIC_WAKE_BOOST=1` turns it on; without the privilege it stays off.
    pub wake_boost: bool,
    /// Send batches of equal-size packets with UDP GSO when the kernel offers it.
    pub gso: bool,
    /// Receive with UDP GRO (coalesced datagrams) when the kernel offers it.
    pub gro: bool,
    /// What the receive side assumes about IPv4 IDs it cannot see (`RNIC_IPV4_ID`).
    /// Either way the IDs an rnic sender produces are accepted: 0, or a GSO segment's
    /// index below 64 ([`crate::gso::IdVerifier`]); the default, `SolveUnknown`, then
    /// solves for any other ID and counts it (Linux rxe; see [`crate::rx_icrc`]);
    /// `Strict` drops such packets.
    pub ipv4_id: Ipv4IdPolicy,
    /// Send payloads of 512 bytes or more from registered memory without copying them
    /// into the packet first (RC data and READ responses; `RNIC_ZERO_COPY=1` turns it
    /// on). Off by default: the ICRC must read the payload anyway (through a copy, since
    /// the memory is not ours to lend as a slice), and the kernel copies three iovecs
    /// per packet more slowly than one, so copying measured faster (64 KiB `write_bw`,
    /// ten interleaved pairs: 1.09x, every pair at least 1.01x). Off whenever a fault
    /// chain is configured.
    pub zero_copy: bool,
    /// Fault injection on every packet this device sends (real time). When `None`, the
    /// `RNIC_FAULTS` environment variable is read at open (`loss=0.05,seed=7`, see
    /// [`Faults::from_spec`]). With faults, packets are sent one by one (no GSO).
    pub faults: Option<FaultHandle>,
    /// Congestion control (`RNIC_CC=off|dcqcn`, default DCQCN): see [`CongestionControl`].
    pub congestion_control: CongestionControl,
    /// Raw Ethernet: run on this network interface (`veth0`) with whole frames through an
    /// `AF_PACKET` socket instead of a UDP socket (`RNIC_DEVICES=rnic0=10.77.0.2@veth0`).
    /// `ip` is then the device's own IPv4 address, one the host does not own: the device
    /// answers ARP for it. Needs CAP_NET_RAW. The socket is opened in the network
    /// namespace of the thread calling [`Device::open`](crate::device::Device::open).
    pub netdev: Option<String>,
    /// How many shards the device's work is spread over: each an engine with its own
    /// socket in the device's reuseport group and its own progress thread, holding the
    /// QPs created on it (the kernel steers each datagram to its QP's shard, so one QP's
    /// packets stay on one thread, in order). `None` (the default): `RNIC_SHARDS` when set
    /// (for UDP devices), else, for the device's first process, half the CPUs it may use
    /// (`sched_getaffinity`), at most 8, at least 1, and no more than the device's group
    /// has members free; a process that finds others already on the device runs one
    /// (every shard is one of the group's 64 members, which a job of many processes on one
    /// device needs). Raw-Ethernet devices run one (every `AF_PACKET` socket on an
    /// interface sees every frame: nothing steers a frame to one of several). A number
    /// is taken exactly or the open fails, naming why.
    pub shards: Option<usize>,
    /// Raw Ethernet: tag this device's frames with this 802.1Q VLAN ID (1..=4094) and take
    /// only frames of that VLAN (`RNIC_DEVICES=rnic0=10.77.0.2@veth0:42`).
    pub vlan: Option<u16>,
}

/// Congestion control of a device.
///
/// With [`Dcqcn`](CongestionControl::Dcqcn), the default, the device is a DCQCN
/// notification point (a packet that arrives ECN-CE-marked, or while its socket's receive
/// queue is above a threshold, is answered with a CNP to its sender QP, at most one per QP
/// per 4 us) and reaction point (each RC QP has a rate, cut by CNPs and by loss,
/// recovering on DCQCN's timers, and a pacer), and sends its packets ECN-capable
/// (ECT(0)), as mlx5 does with `roce_np`/`roce_rp` enabled. `Off` does none of that.
/// Flow control (the in-flight bound per destination) applies either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CongestionControl {
    /// No congestion control.
    Off,
    /// DCQCN with mlx5's parameters at [`CC_LINE_RATE`].
    #[default]
    Dcqcn,
}

impl CongestionControl {
    /// `RNIC_CC`: `off` or `dcqcn` (unset: DCQCN).
    pub fn from_env() -> Result<CongestionControl, String> {
        match std::env::var("RNIC_CC") {
            Err(_) => Ok(CongestionControl::Dcqcn),
            Ok(v) => match v.trim() {
                "off" | "0" | "none" => Ok(CongestionControl::Off),
                "dcqcn" | "1" | "on" => Ok(CongestionControl::Dcqcn),
                _ => Err(format!("RNIC_CC={v:?}: `dcqcn` (the default) or `off`")),
            },
        }
    }

    /// The engine's parameters for it.
    pub fn params(self) -> Option<crate::cc::DcqcnParams> {
        match self {
            CongestionControl::Off => None,
            CongestionControl::Dcqcn => Some(crate::cc::DcqcnParams::mlx5(CC_LINE_RATE)),
        }
    }
}

/// The line rate DCQCN starts every QP at and recovers to, bytes/s: 100 Gbit/s, above
/// what loopback carries, so an uncongested QP is never paced.
pub const CC_LINE_RATE: f64 = 12.5e9;

impl DeviceConfig {
    /// A device `name` at `ip`, port 4791, pinning on, with the settings the environment
    /// gives ([`EnvSettings`]: `RNIC_PCAP`, `RNIC_SPIN_US`, `RNIC_ZERO_COPY`,
    /// `RNIC_IPV4_ID`, `RNIC_CC`). A variable that does not parse leaves its default here,
    /// and [`Device::open`](crate::device::Device::open) then refuses to open, naming it: never a silent fallback.
    pub fn new(name: impl Into<String>, ip: IpAddr) -> DeviceConfig {
        let env = EnvSettings::read().unwrap_or_default();
        DeviceConfig {
            name: name.into(),
            ip,
            port: ROCEV2_UDP_PORT,
            pin_memory: true,
            capture: env.pcap,
            max_mr: DEFAULT_MAX_MR,
            spin: env.spin.unwrap_or(Duration::from_micros(DEFAULT_SPIN_US)),
            wake_boost: env.wake_boost.unwrap_or(false),
            gso: true,
            gro: true,
            ipv4_id: env.ipv4_id.unwrap_or_default(),
            zero_copy: env.zero_copy.unwrap_or(false),
            faults: None,
            congestion_control: env.cc.unwrap_or_default(),
            netdev: None,
            vlan: None,
            shards: None,
        }
    }
}

/// Every environment variable a device reads, parsed in this one place, strictly: a
/// value that does not parse is an error naming the variable and what it takes.
/// (`RNIC_DEVICES`, which names the devices, is the verbs API's: `rnic_verbs::devices`.)
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EnvSettings {
    /// `RNIC_PCAP=FILE`: capture every packet to this pcap.
    pub pcap: Option<PathBuf>,
    /// `RNIC_SPIN_US=N`: spin-before-sleep of the device threads, microseconds.
    pub spin: Option<Duration>,
    /// `RNIC_ZERO_COPY=0|1`: send payloads from registered memory (1) or copy them into
    /// the packet (0, the default).
    pub zero_copy: Option<bool>,
    /// `RNIC_IPV4_ID=solve|strict`: the receive side's IPv4 ID policy.
    pub ipv4_id: Option<Ipv4IdPolicy>,
    /// `RNIC_CC=dcqcn|off`: congestion control.
    pub cc: Option<CongestionControl>,
    /// `RNIC_FAULTS=loss=P,...`: a fault chain on every packet sent ([`Faults::from_spec`]).
    pub faults: Option<String>,
    /// `RNIC_WAKE_BOOST=0|1`: the progress thread's real-time wake-ups
    /// ([`DeviceConfig::wake_boost`]).
    pub wake_boost: Option<bool>,
    /// `RNIC_SHARDS=N`: the shards of every UDP device whose configuration leaves them
    /// open ([`DeviceConfig::shards`]), 1 to 64.
    pub shards: Option<usize>,
}

impl EnvSettings {
    /// Reads and checks them all.
    pub fn read() -> Result<EnvSettings, String> {
        let var = |k: &str| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned());
        let mut e = EnvSettings { pcap: std::env::var_os("RNIC_PCAP").map(PathBuf::from), ..EnvSettings::default() };
        if let Some(v) = var("RNIC_SPIN_US") {
            let us =
                v.trim().parse::<u64>().map_err(|_| format!("RNIC_SPIN_US={v:?}: not a number of microseconds"))?;
            e.spin = Some(Duration::from_micros(us));
        }
        if let Some(v) = var("RNIC_ZERO_COPY") {
            e.zero_copy = Some(match v.trim() {
                "0" => false,
                "1" => true,
                _ => return Err(format!("RNIC_ZERO_COPY={v:?}: 0 (copy payloads into packets, the default) or 1")),
            });
        }
        if let Some(v) = var("RNIC_WAKE_BOOST") {
            e.wake_boost = Some(match v.trim() {
                "0" => false,
                "1" => true,
                _ => {
                    return Err(format!(
                        "RNIC_WAKE_BOOST={v:?}: 1 (wake the progress thread at real-time priority where allowed) \
                         or 0 (the default)"
                    ))
                }
            });
        }
        if let Some(v) = var("RNIC_SHARDS") {
            e.shards = Some(parse_shards(&v).map_err(|why| format!("RNIC_SHARDS={v:?}: {why}"))?);
        }
        e.ipv4_id = crate::rx_icrc::policy_from_env()?;
        if std::env::var_os("RNIC_CC").is_some() {
            e.cc = Some(CongestionControl::from_env()?);
        }
        if let Some(v) = var("RNIC_FAULTS") {
            Faults::from_spec(&v).map_err(|why| format!("RNIC_FAULTS: {why}"))?;
            e.faults = Some(v);
        }
        Ok(e)
    }
}

/// The most shards a device takes: every shard is a member of the device's group of
/// processes, which has `share::MEMBERS` (the driver checks that they agree).
pub(crate) const MAX_SHARDS: usize = 64;

/// `RNIC_SHARDS`'s value: a number of shards, 1 to [`MAX_SHARDS`].
fn parse_shards(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_SHARDS).contains(&n) => Ok(n),
        Ok(_) => Err(format!("a device runs 1 to {MAX_SHARDS} shards")),
        Err(_) => Err(format!("not a number of shards (1 to {MAX_SHARDS}; unset: half the CPUs, at most 8)")),
    }
}

/// Why a driver call failed: opening the device, registering memory, or a QP verb the
/// engine refused (the one error type of [`Device`](crate::device::Device)'s calls).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The UDP socket could not be bound.
    #[error("device {name}: cannot bind UDP {addr}: {source}")]
    Bind {
        /// Device name.
        name: String,
        /// Address.
        addr: SocketAddr,
        /// Cause.
        source: io::Error,
    },
    /// The capture file could not be created.
    #[error("device {name}: cannot create capture file {path}: {source}")]
    Capture {
        /// Device name.
        name: String,
        /// Path.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
    /// Any other I/O failure.
    #[error("device {name}: {source}")]
    Io {
        /// Device name.
        name: String,
        /// Cause.
        source: io::Error,
    },
    /// Registration was refused.
    #[error(transparent)]
    Mr(#[from] MrError),
    /// Memory could not be mapped or pinned.
    #[error(transparent)]
    Mem(#[from] MemError),
    /// `RNIC_FAULTS` does not parse.
    #[error("device {name}: RNIC_FAULTS: {reason}")]
    Faults {
        /// Device name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The raw-Ethernet transport could not be set up on its interface.
    #[error("device {name}: interface {netdev}: {why}")]
    Netdev {
        /// Device name.
        name: String,
        /// The interface.
        netdev: String,
        /// What is wrong.
        why: String,
    },
    /// The configuration (or an environment variable feeding it) is invalid.
    #[error("device {name}: {why}")]
    Config {
        /// Device name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// The progress thread has stopped.
    #[error("device {0}: the progress thread has stopped")]
    Stopped(String),
    /// The engine refused a QP verb (create, modify, query, destroy).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// How the UDP transport moves packets, decided when the device opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportInfo {
    /// Sends batch equal-size packets into one UDP GSO (`UDP_SEGMENT`) send.
    pub gso: bool,
    /// Receives take GRO-coalesced datagrams (`UDP_GRO`).
    pub gro: bool,
    /// Spin-before-sleep time of the device threads.
    pub spin: Duration,
    /// Raw Ethernet frames on an interface (`DeviceConfig::netdev`) instead of UDP.
    pub raw: bool,
}

#[cfg(test)]
mod tests {
    use super::parse_shards;

    #[test]
    fn rnic_shards_takes_1_to_64_and_says_what_else_is_wrong() {
        assert_eq!(parse_shards("1"), Ok(1));
        assert_eq!(parse_shards(" 64 "), Ok(64));
        assert!(parse_shards("0").unwrap_err().contains("1 to 64"));
        assert!(parse_shards("65").unwrap_err().contains("1 to 64"));
        assert!(parse_shards("auto").unwrap_err().contains("not a number"));
        assert!(parse_shards("-2").unwrap_err().contains("not a number"));
    }
}
