//! A network namespace joined to this one by a veth pair, for tests that
//! cut a host off its database: a host run in the namespace (`ip netns
//! exec`) reaches the server at [`Netns::outside`] over TCP, and taking
//! the link down partitions it while every process keeps running. Made
//! with iproute2 as root; removed (namespace and both ends) when dropped.

use std::process::Command;

/// A namespace and its link.
pub struct Netns {
    name: String,
    outer: String,
    /// This side's address, the server's for the host inside.
    pub outside: String,
    /// The namespace's own address.
    pub inside: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// A fresh namespace named after this process, linked by a /30 of
    /// 10.231.0.0/16, or why one cannot be made here (no iproute2, not
    /// root, no namespace support).
    pub fn create() -> Result<Self, String> {
        let id = std::process::id();
        let name = format!("wfhns{id}");
        let outer = format!("wfho{id}");
        let inner = format!("wfhi{id}");
        let (a, b) = ((id / 64) % 256, (id % 64) * 4);
        let ns = Self {
            outside: format!("10.231.{a}.{}", b + 1),
            inside: format!("10.231.{a}.{}", b + 2),
            name,
            outer,
        };
        ip(&["netns", "add", &ns.name])?;
        let setup = || -> Result<(), String> {
            ip(&[
                "link", "add", &ns.outer, "type", "veth", "peer", "name", &inner,
            ])?;
            ip(&["link", "set", &inner, "netns", &ns.name])?;
            ip(&[
                "addr",
                "add",
                &format!("{}/30", ns.outside),
                "dev",
                &ns.outer,
            ])?;
            ip(&["link", "set", &ns.outer, "up"])?;
            let exec = ["netns", "exec", &ns.name, "ip"];
            let inside = format!("{}/30", ns.inside);
            ip(&[&exec[..], &["addr", "add", &inside, "dev", &inner]].concat())?;
            ip(&[&exec[..], &["link", "set", &inner, "up"]].concat())?;
            ip(&[&exec[..], &["link", "set", "lo", "up"]].concat())
        };
        setup()?;
        Ok(ns)
    }

    /// The command prefix that runs a program inside.
    pub fn exec(&self) -> Vec<&str> {
        vec!["ip", "netns", "exec", &self.name]
    }

    /// Takes the link down (a partition) or up again.
    pub fn link(&self, up: bool) {
        let state = if up { "up" } else { "down" };
        if let Err(e) = ip(&["link", "set", &self.outer, state]) {
            panic!("{e}");
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.outer]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
