//! The device handle (`ibv_context`) and its backend: an emulated rnic device or, with
//! the cargo feature `hw`, a real RDMA device through libibverbs.

use crate::types::{DeviceAttr, DeviceKind, Gid, PortAttr};
use crate::{
    AsyncEvent, CompChannel, CompletionQueue, DeviceConfig, DeviceError, Error, FaultHandle, Interface, PathMtu,
    ProtectionDomain, QpRate, Result, TransportInfo,
};
use parking_lot::Mutex;
use rnic_core::device::Device;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// An open device (`ibv_context`). Cloning gives another handle to the same device.
///
/// [`Context::open`] takes an emulated device's name (`rnic0`) or, built with the cargo
/// feature `hw`, a libibverbs device's (`rxe0`, `mlx5_0`); everything below a context
/// (PDs, MRs, CQs, QPs, SRQs, AHs, completion channels, async events) works the same on
/// both. What only the emulator has (the CM, fault injection, capture, congestion
/// control, [`Context::progress`]) returns [`Error::Unsupported`] on hardware.
#[derive(Clone, Debug)]
pub struct Context {
    pub(crate) b: Backend,
}

/// Which device a handle belongs to: a plain enum, so every call is a direct call.
#[derive(Clone, Debug)]
pub(crate) enum Backend {
    Emu(Emu),
    #[cfg(feature = "hw")]
    Hw(Hw),
}

/// An emulated device.
#[derive(Clone, Debug)]
pub(crate) struct Emu {
    pub(crate) dev: Device,
    /// CM events a connecting call took that were not its own, for `cm_get_event`.
    pub(crate) cm_stash: Arc<Mutex<VecDeque<rnic_core::cm::CmEvent>>>,
}

/// A libibverbs device, with what does not change while it is open.
#[cfg(feature = "hw")]
#[derive(Clone, Debug)]
pub(crate) struct Hw {
    pub(crate) ctx: crate::hw::HwContext,
    ip: IpAddr,
    attr: Arc<DeviceAttr>,
}

/// A hardware error as this crate's: timeouts and unsupported features keep their own
/// variants, everything else names the call.
#[cfg(feature = "hw")]
pub(crate) fn hw_err<'d>(op: &'static str, device: &'d str) -> impl FnOnce(crate::hw::HwError) -> Error + 'd {
    move |e| match e {
        crate::hw::HwError::Timeout(t) => Error::Timeout(t),
        crate::hw::HwError::Unsupported(why) => Error::Unsupported { op, device: device.to_string(), why },
        source => Error::Hw { op, source },
    }
}

#[cfg(feature = "hw")]
impl Hw {
    fn open(name: &str) -> Result<Hw> {
        let ctx = crate::hw::HwContext::open(name).map_err(hw_err("open device", name))?;
        let raw = ctx.query_device().map_err(hw_err("query device", name))?;
        let attr = Arc::new(crate::hw::convert::device_attr(&raw));
        let ip = crate::discovery::roce_ip(&ctx).ok_or_else(|| Error::InvalidArgument {
            op: "open device",
            why: format!("{name} has no RoCE v2 GID on port 1 (give its network interface an IP address)"),
        })?;
        Ok(Hw { ctx, ip, attr })
    }
}

impl Context {
    /// Opens a device by name: an emulated one (see [`devices`](crate::devices)) or,
    /// built with the cargo feature `hw`, a libibverbs device (`rxe0`, `mlx5_0`).
    pub fn open(name: &str) -> Result<Context> {
        let emulated = crate::discovery::emulated_devices()?;
        if let Some(d) = emulated.iter().find(|d| d.name == name) {
            return Context::open_with(DeviceConfig {
                netdev: d.netdev.clone(),
                vlan: d.vlan,
                ..DeviceConfig::new(&d.name, d.ip)
            });
        }
        #[cfg(feature = "hw")]
        {
            let hw = crate::discovery::hw_devices()?;
            if hw.iter().any(|d| d.name == name) {
                return Ok(Context { b: Backend::Hw(Hw::open(name)?) });
            }
            Err(Error::NoSuchDevice {
                name: name.into(),
                known: emulated
                    .iter()
                    .map(|d| format!("{}={}", d.name, d.ip))
                    .chain(hw.iter().map(|d| format!("{} (hardware)", d.name)))
                    .collect::<Vec<_>>()
                    .join(",")
                    + if hw.is_empty() { "; libibverbs lists no hardware device" } else { "" },
            })
        }
        #[cfg(not(feature = "hw"))]
        Err(Error::NoSuchDevice {
            name: name.into(),
            known: emulated.iter().map(|d| format!("{}={}", d.name, d.ip)).collect::<Vec<_>>().join(",")
                + " (hardware devices need the cargo feature `hw`)",
        })
    }

    /// Opens an emulated device with this name bound to `ip`.
    pub fn open_at(name: &str, ip: IpAddr) -> Result<Context> {
        Context::open_with(DeviceConfig::new(name, ip))
    }

    /// Opens an emulated device with a full configuration (port, pinning, capture file).
    pub fn open_with(config: DeviceConfig) -> Result<Context> {
        Ok(Context {
            b: Backend::Emu(Emu { dev: Device::open(config).map_err(Error::OpenDevice)?, cm_stash: Arc::default() }),
        })
    }

    /// Which backend runs the device.
    pub fn kind(&self) -> DeviceKind {
        match &self.b {
            Backend::Emu(_) => DeviceKind::Emulated,
            #[cfg(feature = "hw")]
            Backend::Hw(_) => DeviceKind::Hardware,
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        match &self.b {
            Backend::Emu(e) => e.dev.name(),
            #[cfg(feature = "hw")]
            Backend::Hw(h) => h.ctx.name(),
        }
    }

    /// The address the device sends from: an emulated device's own; a hardware device's
    /// first RoCE v2 GID's (IPv4 first).
    pub fn ip(&self) -> IpAddr {
        match &self.b {
            Backend::Emu(e) => e.dev.local_addr().ip(),
            #[cfg(feature = "hw")]
            Backend::Hw(h) => h.ip,
        }
    }

    /// Whether the device sends to and from its link-local GID 0 (`fe80::`): a hardware
    /// device and an emulated one on raw Ethernet do; the UDP transport cannot (its socket
    /// is bound to the device's address).
    pub fn carries_link_local(&self) -> bool {
        self.emulated().is_none_or(|d| d.interface().is_some())
    }

    /// The emulated device under this context, `None` on hardware (the driver's handle
    /// stays inside this crate: what a program may ask of it is below).
    fn emulated(&self) -> Option<&Device> {
        match &self.b {
            Backend::Emu(e) => Some(&e.dev),
            #[cfg(feature = "hw")]
            Backend::Hw(_) => None,
        }
    }

    /// How the emulated device moves packets (UDP GSO/GRO, raw Ethernet, spin time);
    /// `None` on hardware.
    pub fn transport(&self) -> Option<TransportInfo> {
        self.emulated().map(Device::transport)
    }

    /// The UDP address the emulated device's socket is bound to (a raw-Ethernet device:
    /// its address, port 4791); `None` on hardware.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.emulated().map(Device::local_addr)
    }

    /// The emulated device's MAC: its interface's on raw Ethernet, the locally
    /// administered 02:52:a:b:c:d of its IPv4 address over UDP (what GID 0 and captures
    /// carry); `None` on hardware.
    pub fn mac(&self) -> Option<[u8; 6]> {
        self.emulated().map(|d| d.mac().0)
    }

    /// The network interface a raw-Ethernet device runs on; `None` over UDP and on
    /// hardware.
    pub fn interface(&self) -> Option<&Interface> {
        self.emulated().and_then(Device::interface)
    }

    /// The configuration the emulated device was opened with (after the environment's
    /// `RNIC_*` settings); `None` on hardware.
    pub fn config(&self) -> Option<&DeviceConfig> {
        self.emulated().map(Device::config)
    }

    /// The emulated device's fault-injection rules, to add and remove at run time (see
    /// [`Faults`](crate::Faults)); `None` when it was opened without a fault chain
    /// (`DeviceConfig::faults`, `RNIC_FAULTS`) and on hardware.
    pub fn faults(&self) -> Option<&FaultHandle> {
        self.emulated().and_then(Device::faults)
    }

    /// Each RC QP's congestion-control rate (DCQCN's reaction point), in QP order; empty
    /// with congestion control off and on hardware.
    pub fn qp_rates(&self) -> Vec<QpRate> {
        self.emulated().map(Device::qp_rates).unwrap_or_default()
    }

    /// The emulator, or [`Error::Unsupported`] naming `op` on hardware.
    #[cfg_attr(not(feature = "hw"), allow(unused_variables))]
    pub(crate) fn emu(&self, op: &'static str) -> Result<&Emu> {
        match &self.b {
            Backend::Emu(e) => Ok(e),
            #[cfg(feature = "hw")]
            Backend::Hw(h) => Err(Error::Unsupported {
                op,
                device: h.ctx.name().to_string(),
                why: "rnic's emulator has it; the hardware backend does not".into(),
            }),
        }
    }

    /// GID `index` of port 1. Emulated devices have rxe's table: index 0 the link-local
    /// GID of the device's MAC (for a UDP device the locally administered
    /// 02:52:a:b:c:d), index 1 the address's RoCEv2 GID. A hardware device's table is
    /// its own (on rxe, the same shape).
    pub fn gid(&self, index: u32) -> Option<Gid> {
        match &self.b {
            Backend::Emu(e) => match index {
                0 => Some(Gid::from_ip(IpAddr::V6(rnic_core::engine::link_local(rnic_core::engine::guid_for_mac(
                    e.dev.mac().0,
                ))))),
                1 => Some(Gid::from_ip(self.ip())),
                _ => None,
            },
            #[cfg(feature = "hw")]
            Backend::Hw(h) => h.ctx.gid(1, index).ok().map(|g| Gid(g.gid)).filter(|g| g.0 != [0; 16]),
        }
    }

    /// The GID index that carries traffic on an emulated device: 1, the address's RoCEv2
    /// GID (`-g 1`, as with rxe); index 0, the link-local GID, names the device but a UDP
    /// transport cannot send from it.
    pub const ROUTABLE_GID_INDEX: u32 = 1;

    /// Device attributes (`ibv_query_device`).
    pub fn query_device(&self) -> DeviceAttr {
        match &self.b {
            Backend::Emu(e) => {
                // The EUI-64 of the device's MAC, as rxe derives its node GUID (and the CM
                // its CA GUID).
                let node_guid = rnic_core::engine::guid_for_mac(e.dev.mac().0);
                let c = e.dev.caps();
                DeviceAttr {
                    fw_ver: c.fw_ver.to_string(),
                    node_guid,
                    vendor_id: c.vendor_id,
                    vendor_part_id: c.vendor_part_id,
                    hw_ver: c.hw_ver,
                    max_qp: c.max_qp,
                    max_qp_wr: c.max_qp_wr,
                    max_sge: c.max_sge,
                    max_cq: c.max_cq,
                    max_cqe: c.max_cqe,
                    max_mr: c.max_mr,
                    max_mr_size: c.max_mr_size,
                    page_size_cap: c.page_size_cap,
                    max_pd: c.max_pd,
                    max_qp_rd_atom: c.max_qp_rd_atom,
                    max_qp_init_rd_atom: c.max_qp_init_rd_atom,
                    atomic_cap: "ATOMIC_HCA",
                    max_srq: c.max_srq,
                    max_srq_wr: c.max_srq_wr,
                    max_srq_sge: c.max_srq_sge,
                    max_inline_data: c.max_inline_data,
                    phys_port_cnt: c.phys_port_cnt,
                }
            }
            #[cfg(feature = "hw")]
            Backend::Hw(h) => (*h.attr).clone(),
        }
    }

    /// Attributes of port 1 (`ibv_query_port`).
    pub fn query_port(&self) -> Result<PortAttr> {
        match &self.b {
            Backend::Emu(e) => Ok(PortAttr {
                state: "PORT_ACTIVE",
                max_mtu: PathMtu::Mtu4096,
                active_mtu: e.dev.port_mtu(),
                gid_tbl_len: 2,
                link_layer: "Ethernet",
                lid: 0,
            }),
            #[cfg(feature = "hw")]
            Backend::Hw(h) => {
                let raw = h.ctx.query_port(1).map_err(hw_err("query port", self.name()))?;
                crate::hw::convert::port_attr(&raw).map_err(hw_err("query port", self.name()))
            }
        }
    }

    /// Every counter: an emulated device's, named as rxe names its hw_counters; a
    /// hardware device's port counters from sysfs (rxe and mlx5 have them).
    pub fn counters(&self) -> Vec<(String, u64)> {
        match &self.b {
            Backend::Emu(e) => e.dev.counters().snapshot().into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
            #[cfg(feature = "hw")]
            Backend::Hw(h) => h.ctx.counters(1),
        }
    }

    /// One counter.
    pub fn counter(&self, name: &str) -> Option<u64> {
        match &self.b {
            Backend::Emu(e) => e.dev.counters().get(name),
            #[cfg(feature = "hw")]
            Backend::Hw(h) => h.ctx.counters(1).into_iter().find(|(n, _)| n == name).map(|(_, v)| v),
        }
    }

    /// The next asynchronous event, if one is waiting. On hardware, events rnic's
    /// [`AsyncEvent`] has no variant for (COMM_EST, SQ drained, ...) are skipped.
    pub fn poll_async_event(&self) -> Result<Option<AsyncEvent>> {
        match &self.b {
            Backend::Emu(e) => Ok(e.dev.events().try_recv().ok()),
            #[cfg(feature = "hw")]
            Backend::Hw(h) => loop {
                match h.ctx.poll_async_event().map_err(hw_err("get async event", self.name()))? {
                    None => return Ok(None),
                    Some(ev) => {
                        if let Some(ev) = crate::hw::convert::async_event(&ev) {
                            return Ok(Some(ev));
                        }
                    }
                }
            },
        }
    }

    /// Sleeps until the next asynchronous event (`ibv_get_async_event`) or `timeout`:
    /// QP fatal, QP access error, CQ error, SRQ limit reached, port active (raised once
    /// at open).
    pub fn get_async_event(&self, timeout: Duration) -> Result<AsyncEvent> {
        match &self.b {
            Backend::Emu(e) => match e.dev.events().recv_timeout(timeout) {
                Ok(ev) => Ok(ev),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => Err(Error::EventTimeout(timeout)),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    Err(Error::DeviceStopped(DeviceError::Stopped(self.name().into())))
                }
            },
            #[cfg(feature = "hw")]
            Backend::Hw(h) => {
                let deadline = std::time::Instant::now() + timeout;
                loop {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    let ev = h.ctx.get_async_event(left).map_err(|e| match e {
                        crate::hw::HwError::Timeout(_) => Error::EventTimeout(timeout),
                        e => hw_err("get async event", self.name())(e),
                    })?;
                    if let Some(ev) = crate::hw::convert::async_event(&ev) {
                        return Ok(ev);
                    }
                }
            }
        }
    }

    /// Creates a completion channel (`ibv_create_comp_channel`): CQs created with it
    /// report armed notifications there, and a thread can sleep in
    /// [`CompChannel::get_cq_event`].
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        CompChannel::create(self)
    }

    /// Creates a completion queue whose notifications go to `channel`.
    pub fn create_cq_with_channel(&self, depth: usize, channel: &CompChannel) -> Result<CompletionQueue> {
        CompletionQueue::create(self, depth, Some(channel))
    }

    /// Allocates a protection domain (`ibv_alloc_pd`).
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
        ProtectionDomain::alloc(self)
    }

    /// Creates a completion queue with room for `depth` completions.
    pub fn create_cq(&self, depth: usize) -> Result<CompletionQueue> {
        CompletionQueue::create(self, depth, None)
    }

    /// Runs one round of an emulated device's work (received packets, posted work,
    /// timers, sends) on the calling thread, unless the device's progress thread is
    /// running one. For busy-polling loops that want no thread hand-off between a packet
    /// and their poll (as `rnic perf`'s latency tests do). Returns whether there was work;
    /// never blocks. A hardware device progresses by itself: always false.
    pub fn progress(&self) -> bool {
        match &self.b {
            Backend::Emu(e) => e.dev.progress(),
            #[cfg(feature = "hw")]
            Backend::Hw(_) => false,
        }
    }

    /// True when `other` is the same device (a clone of this context or one opened on
    /// the same device).
    pub(crate) fn same_device(&self, other: &Context) -> bool {
        match (&self.b, &other.b) {
            (Backend::Emu(a), Backend::Emu(b)) => a.dev.local_addr() == b.dev.local_addr(),
            #[cfg(feature = "hw")]
            (Backend::Hw(a), Backend::Hw(b)) => a.ctx.as_ptr() == b.ctx.as_ptr(),
            #[cfg(feature = "hw")]
            _ => false,
        }
    }
}
