//! `rnic devinfo`: ibv_devinfo for the emulated devices: attributes, port state, MTUs,
//! link layer, GID table, and with `-v` the limits and counters. The layout (names,
//! tabs, `value (code)` forms) is ibv_devinfo's, so scripts that read one read the other.
//!
//! Each device is opened to be queried, on an ephemeral UDP port so that a device
//! another process is using (bound to UDP 4791 on its address) can still be shown. A
//! device is an instance per process: its counters here are this query's (zero); a
//! program reads its own with `Context::counters` (or `rnic pingpong --counters`).

use rnic_verbs::DeviceConfig;
use rnic_verbs::{devices, Context, DeviceInfo, DeviceKind, PathMtu};
use std::fmt::Write as _;
use std::process::ExitCode;

/// Arguments of `rnic devinfo` (ibv_devinfo's letters).
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Only this device.
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Only this port (rnic devices have one, 1).
    #[arg(short = 'i', long = "ib-port")]
    pub port: Option<u8>,
    /// List the devices and stop.
    #[arg(short = 'l', long = "list")]
    pub list: bool,
    /// Also the limits, the GID table details and the counters.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Raw Ethernet: show the device (-d, default rnic0) opened on this network interface
    /// at --ip (its port MTU, its MAC's GID 0); needs CAP_NET_RAW.
    #[arg(long, requires = "ip")]
    pub netdev: Option<String>,
    /// The address of the --netdev device.
    #[arg(long, requires = "netdev")]
    pub ip: Option<std::net::IpAddr>,
}

/// Runs devinfo; 0 when every device asked for could be shown.
pub fn run(a: &Args) -> ExitCode {
    if let (Some(netdev), Some(ip)) = (&a.netdev, a.ip) {
        let name = a.dev.clone().unwrap_or_else(|| "rnic0".into());
        let config =
            DeviceConfig { port: 0, pin_memory: false, netdev: Some(netdev.clone()), ..DeviceConfig::new(&name, ip) };
        return match Context::open_with(config).and_then(|ctx| render(&ctx, a.verbose)) {
            Ok(s) => {
                print!("{s}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rnic devinfo: {name} on {netdev}: {}", e.report());
                ExitCode::from(1)
            }
        };
    }
    let all = match devices() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rnic devinfo: {e}");
            return ExitCode::from(2);
        }
    };
    if a.list {
        print!("{}", list(&all));
        return ExitCode::SUCCESS;
    }
    let chosen: Vec<&DeviceInfo> = match &a.dev {
        Some(name) => match all.iter().find(|d| &d.name == name) {
            Some(d) => vec![d],
            None => {
                let known: Vec<&str> = all.iter().map(|d| d.name.as_str()).collect();
                eprintln!(
                    "rnic devinfo: IB device '{name}' wasn't found (devices: {}; see RNIC_DEVICES)",
                    known.join(", ")
                );
                return ExitCode::from(255);
            }
        },
        None => all.iter().collect(),
    };
    if let Some(p) = a.port.filter(|p| *p != 1) {
        eprintln!("rnic devinfo: invalid port {p} (rnic devices have one port, 1)");
        return ExitCode::from(255);
    }
    let mut failed = false;
    for d in chosen {
        let opened = match d.kind {
            DeviceKind::Emulated => Context::open_with(DeviceConfig {
                port: 0,
                pin_memory: false,
                capture: None,
                netdev: d.netdev.clone(),
                vlan: d.vlan,
                ..DeviceConfig::new(&d.name, d.ip)
            }),
            DeviceKind::Hardware => Context::open(&d.name),
        };
        match opened.and_then(|ctx| render(&ctx, a.verbose)) {
            Ok(s) => print!("{s}"),
            Err(e) => {
                eprintln!("rnic devinfo: {} ({}): {}", d.name, d.kind, e.report());
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// ibv_devinfo -l.
pub fn list(all: &[DeviceInfo]) -> String {
    let mut s = format!("{} HCA{} found:\n", all.len(), if all.len() == 1 { "" } else { "s" });
    for d in all {
        let _ = writeln!(s, "\t{}", d.name);
    }
    s
}

/// A GUID as ibv_devinfo prints it: four groups of four hex digits.
pub fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!("{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7])
}

fn mtu(m: PathMtu) -> String {
    format!("{} ({})", m.bytes(), m.to_ibv())
}

fn atomic_code(name: &str) -> u8 {
    match name {
        "ATOMIC_HCA" => 1,
        "ATOMIC_GLOB" => 2,
        _ => 0,
    }
}

/// Appends `<indent>key:<tabs>value`.
fn kv(s: &mut String, indent: &str, key: &str, tabs: &str, v: impl std::fmt::Display) {
    let _ = writeln!(s, "{indent}{key}:{tabs}{v}");
}

/// One device's block, as ibv_devinfo [-v] prints it.
pub fn render(ctx: &Context, verbose: bool) -> Result<String, rnic_verbs::Error> {
    let d = ctx.query_device();
    let p = ctx.query_port()?;
    let mut s = String::new();
    let dev = |s: &mut String, k: &str, tabs: &str, v: &dyn std::fmt::Display| kv(s, "\t", k, tabs, v);
    let port = |s: &mut String, k: &str, tabs: &str, v: &dyn std::fmt::Display| kv(s, "\t\t\t", k, tabs, v);
    kv(&mut s, "", "hca_id", "\t", ctx.name());
    // RoCE is the InfiniBand transport over Ethernet: rxe reports "InfiniBand (0)" too.
    dev(&mut s, "transport", "\t\t\t", &"InfiniBand (0)");
    dev(&mut s, "fw_ver", "\t\t\t\t", &d.fw_ver);
    dev(&mut s, "node_guid", "\t\t\t", &guid(d.node_guid));
    dev(&mut s, "sys_image_guid", "\t\t\t", &guid(d.node_guid));
    dev(&mut s, "vendor_id", "\t\t\t", &format_args!("0x{:04x}", d.vendor_id));
    dev(&mut s, "vendor_part_id", "\t\t\t", &d.vendor_part_id);
    dev(&mut s, "hw_ver", "\t\t\t\t", &format_args!("{:#x}", d.hw_ver));
    dev(&mut s, "phys_port_cnt", "\t\t\t", &d.phys_port_cnt);
    if verbose {
        dev(&mut s, "max_mr_size", "\t\t\t", &format_args!("{:#x}", d.max_mr_size));
        dev(&mut s, "page_size_cap", "\t\t\t", &format_args!("{:#x}", d.page_size_cap));
        dev(&mut s, "max_qp", "\t\t\t\t", &d.max_qp);
        dev(&mut s, "max_qp_wr", "\t\t\t", &d.max_qp_wr);
        dev(&mut s, "max_sge", "\t\t\t", &d.max_sge);
        dev(&mut s, "max_sge_rd", "\t\t\t", &d.max_sge);
        dev(&mut s, "max_cq", "\t\t\t\t", &d.max_cq);
        dev(&mut s, "max_cqe", "\t\t\t", &d.max_cqe);
        dev(&mut s, "max_mr", "\t\t\t\t", &d.max_mr);
        dev(&mut s, "max_pd", "\t\t\t\t", &d.max_pd);
        dev(&mut s, "max_qp_rd_atom", "\t\t\t", &d.max_qp_rd_atom);
        dev(&mut s, "max_ee_rd_atom", "\t\t\t", &0);
        dev(&mut s, "max_qp_init_rd_atom", "\t\t", &d.max_qp_init_rd_atom);
        dev(&mut s, "max_ee_init_rd_atom", "\t\t", &0);
        dev(&mut s, "atomic_cap", "\t\t\t", &format_args!("{} ({})", d.atomic_cap, atomic_code(d.atomic_cap)));
        // Not an ibv_devinfo line (ibv_device_attr has no such field): rnic's inline limit.
        dev(&mut s, "max_inline_data", "\t\t", &d.max_inline_data);
    }
    kv(&mut s, "\t\t", "port", "\t", 1);
    port(&mut s, "state", "\t\t\t", &format_args!("{} (4)", p.state));
    port(&mut s, "max_mtu", "\t\t", &mtu(p.max_mtu));
    port(&mut s, "active_mtu", "\t\t", &mtu(p.active_mtu));
    port(&mut s, "sm_lid", "\t\t\t", &0);
    port(&mut s, "port_lid", "\t\t", &p.lid);
    port(&mut s, "port_lmc", "\t\t", &"0x00");
    port(&mut s, "link_layer", "\t\t", &p.link_layer);
    if verbose {
        port(&mut s, "max_msg_sz", "\t\t", &"0x80000000");
        port(&mut s, "gid_tbl_len", "\t\t", &p.gid_tbl_len);
    }
    for i in 0..p.gid_tbl_len {
        if let Some(g) = ctx.gid(i) {
            port(&mut s, &format!("GID[{i:3}]"), "\t\t", &format_args!("{g}, RoCE v2"));
        }
    }
    if verbose {
        // Not an ibv_devinfo line: which backend runs the device.
        port(&mut s, "backend", "\t\t", &ctx.kind());
    }
    if let (true, Some(config)) = (verbose, ctx.config()) {
        // Not ibv_devinfo lines: rnic's congestion and flow control (mlx5 shows these
        // under /sys/class/net/<if>/ecn and in its counters).
        let cc = config.congestion_control;
        let mode = match cc.params() {
            None => "off (RNIC_CC=off)".to_string(),
            Some(p) => format!(
                "DCQCN, line rate {:.1} GB/s, CNP gap 4 us, rpg_time_reset {} us, rpg_byte_reset {}, \
                 rpg_ai_rate {:.0} Mbit/s, rpg_hai_rate {:.0} Mbit/s",
                p.max_rate / 1e9,
                p.time_reset_ns / 1000,
                p.byte_reset,
                p.ai_rate * 8.0 / 1e6,
                p.hai_rate * 8.0 / 1e6
            ),
        };
        port(&mut s, "congestion_control", "\t", &mode);
        let rates = ctx.qp_rates();
        if !rates.is_empty() {
            s.push_str("\t\t\tqp_rates:\n");
            for r in rates {
                let v = format_args!(
                    "{:.1} MB/s (lowest {:.1}, {} CNPs, {} losses)",
                    r.rate / 1e6,
                    r.lowest / 1e6,
                    r.cnps,
                    r.losses
                );
                kv(&mut s, "\t\t\t\t", &format!("{:#08x}", r.qpn), "\t", v);
            }
        }
        s.push_str("\t\t\tcounters:\n");
        for (name, v) in ctx.counters() {
            kv(&mut s, "\t\t\t\t", &name, "\t", v);
        }
    } else if verbose {
        s.push_str("\t\t\tcounters:\n");
        for (name, v) in ctx.counters() {
            kv(&mut s, "\t\t\t\t", &name, "\t", v);
        }
    }
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> Context {
        let config = DeviceConfig {
            port: 0,
            pin_memory: false,
            capture: None,
            ..DeviceConfig::new("rnic9", "127.0.62.1".parse().unwrap())
        };
        Context::open_with(config).unwrap()
    }

    #[test]
    fn the_short_form_is_ibv_devinfo_s() {
        let out = render(&open(), false).unwrap();
        let want = "hca_id:\trnic9\n\
            \ttransport:\t\t\tInfiniBand (0)\n\
            \tfw_ver:\t\t\t\t0.1.0\n\
            \tnode_guid:\t\t\t0052:7fff:fe00:3e01\n\
            \tsys_image_guid:\t\t\t0052:7fff:fe00:3e01\n\
            \tvendor_id:\t\t\t0xffffff\n\
            \tvendor_part_id:\t\t\t0\n\
            \thw_ver:\t\t\t\t0x0\n\
            \tphys_port_cnt:\t\t\t1\n\
            \t\tport:\t1\n\
            \t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\
            \t\t\tmax_mtu:\t\t4096 (5)\n\
            \t\t\tactive_mtu:\t\t4096 (5)\n\
            \t\t\tsm_lid:\t\t\t0\n\
            \t\t\tport_lid:\t\t0\n\
            \t\t\tport_lmc:\t\t0x00\n\
            \t\t\tlink_layer:\t\tEthernet\n\
            \t\t\tGID[  0]:\t\tfe80::52:7fff:fe00:3e01, RoCE v2\n\
            \t\t\tGID[  1]:\t\t::ffff:127.0.62.1, RoCE v2\n\n";
        assert_eq!(out, want);
    }

    #[test]
    fn verbose_adds_limits_and_counters() {
        let out = render(&open(), true).unwrap();
        for want in [
            "\tmax_qp:\t\t\t\t65536\n",
            "\tmax_qp_wr:\t\t\t16384\n",
            "\tmax_sge:\t\t\t32\n",
            "\tmax_cq:\t\t\t\t65536\n",
            "\tmax_mr:\t\t\t\t65536\n",
            "\tmax_mr_size:\t\t\t0x10000000000\n",
            "\tmax_qp_rd_atom:\t\t\t16\n",
            "\tmax_qp_init_rd_atom:\t\t16\n",
            "\tatomic_cap:\t\t\t",
            "\t\t\tgid_tbl_len:\t\t2\n",
            "\t\t\tcounters:\n\t\t\t\tsent_pkts:\t0\n",
            "\t\t\t\ticrc_err:\t0\n",
            "\t\t\tcongestion_control:\t",
            "\t\t\t\tnp_cnp_sent:\t0\n",
            "\t\t\t\trp_cnp_handled:\t0\n",
        ] {
            assert!(out.contains(want), "missing {want:?} in\n{out}");
        }
        // The limits come before the port, the counters after the GID table.
        assert!(out.find("max_qp:").unwrap() < out.find("port:\t1").unwrap());
        assert!(out.find("GID[  0]").unwrap() < out.find("counters:").unwrap());
    }

    #[test]
    fn list_and_guid() {
        let all = vec![
            DeviceInfo {
                name: "rnic0".into(),
                ip: "127.0.0.1".parse().unwrap(),
                kind: DeviceKind::Emulated,
                netdev: None,
                vlan: None,
            },
            DeviceInfo {
                name: "rnic1".into(),
                ip: "127.0.0.2".parse().unwrap(),
                kind: DeviceKind::Emulated,
                netdev: None,
                vlan: None,
            },
        ];
        assert_eq!(list(&all), "2 HCAs found:\n\trnic0\n\trnic1\n");
        assert_eq!(list(&all[..1]), "1 HCA found:\n\trnic0\n");
        assert_eq!(guid(0x5054_00ff_fe77_000b), "5054:00ff:fe77:000b");
    }
}
