//! The test hosts: one network namespace per node on a bridge in a switch
//! namespace, and the harness (the clients) in the root namespace on the
//! same bridge. Faults between nodes are nft rules: the partition matrix
//! in the switch's bridge family (no node namespace touched), packet loss
//! in the node's own namespace, and delay through an NFQUEUE rule that
//! hands the node's packets to the delay shim (`delay.rs`) running inside
//! that namespace. Only node-to-node traffic is ever faulted: clients
//! always reach every running node.
//!
//! Layout, for prefix `tfP` and subnet `10.A.B`:
//!
//! ```text
//! root ns: tfPh 10.A.B.250/24 ── veth ── tfP-sw: br0 ─┬─ tfPv1 ── veth ── tfP-n1: eth0 10.A.B.1/24
//!                                                     ├─ tfPv2 ── … ── tfP-n2: eth0 10.A.B.2/24
//!                                                     └─ …
//! ```

use std::io::Write;
use std::process::{Child, Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
    #[error("cannot run `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
}

#[derive(Debug)]
pub struct Network {
    prefix: String,
    subnet: String,
    nodes: usize,
}

/// The host's address on the bridge (the clients').
const HOST_OCTET: usize = 250;

impl Network {
    /// Creates the switch and `nodes` node namespaces. Names and subnet
    /// come from the process id, so concurrent runs do not meet; stale
    /// ones of a crashed run with this id are removed first.
    pub fn create(nodes: usize) -> Result<Network, NetError> {
        assert!((1..HOST_OCTET).contains(&nodes), "{nodes} nodes");
        let pid = std::process::id() as usize;
        let network = Network {
            prefix: format!("tf{}", pid % 100_000),
            subnet: format!("10.{}.{}", 100 + pid % 100, (pid / 100) % 250),
            nodes,
        };
        network.remove();
        let switch = network.switch();
        let host_link = format!("{}h", network.prefix);
        run(Command::new("ip").args(["netns", "add", &switch]))?;
        network.at_switch(&["ip", "link", "add", "br0", "type", "bridge"])?;
        network.at_switch(&["ip", "link", "set", "br0", "up"])?;
        // The host's port on the bridge.
        run(Command::new("ip").args([
            "link", "add", &host_link, "type", "veth", "peer", "name", "uplink", "netns", &switch,
        ]))?;
        network.at_switch(&["ip", "link", "set", "uplink", "master", "br0", "up"])?;
        run(Command::new("ip").args([
            "addr",
            "add",
            &format!("{}.{HOST_OCTET}/24", network.subnet),
            "dev",
            &host_link,
        ]))?;
        run(Command::new("ip").args(["link", "set", &host_link, "up"]))?;
        for node in 1..=nodes {
            let namespace = network.namespace(node);
            let port = format!("{}v{node}", network.prefix);
            run(Command::new("ip").args(["netns", "add", &namespace]))?;
            run(Command::new("ip").args([
                "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &namespace,
            ]))?;
            run(Command::new("ip").args(["link", "set", &port, "netns", &switch]))?;
            network.at_switch(&["ip", "link", "set", &port, "master", "br0", "up"])?;
            let address = format!("{}/24", network.ip(node));
            network.at(node, &["ip", "addr", "add", &address, "dev", "eth0"])?;
            network.at(node, &["ip", "link", "set", "eth0", "up"])?;
            network.at(node, &["ip", "link", "set", "lo", "up"])?;
        }
        Ok(network)
    }

    pub fn nodes(&self) -> usize {
        self.nodes
    }

    pub fn namespace(&self, node: usize) -> String {
        format!("{}-n{node}", self.prefix)
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.prefix)
    }

    pub fn ip(&self, node: usize) -> String {
        assert!((1..=self.nodes).contains(&node), "node {node}");
        format!("{}.{node}", self.subnet)
    }

    fn peers(&self, node: usize) -> Vec<String> {
        (1..=self.nodes)
            .filter(|&other| other != node)
            .map(|other| self.ip(other))
            .collect()
    }

    /// Drops every packet from `from` to `to` for each pair (replacing the
    /// previous matrix atomically); an empty list heals.
    pub fn set_partition(&self, dropped: &[(usize, usize)]) -> Result<(), NetError> {
        let mut rules = String::new();
        for &(from, to) in dropped {
            rules.push_str(&format!(
                "    ip saddr {} ip daddr {} drop\n",
                self.ip(from),
                self.ip(to)
            ));
        }
        // Declaring then deleting makes the replace work whether or not
        // the table exists.
        let script = format!(
            "table bridge fault\ndelete table bridge fault\n\
             table bridge fault {{\n  chain forward {{\n    type filter hook forward priority 0; policy accept;\n{rules}  }}\n}}\n"
        );
        self.nft(&self.switch(), &script)
    }

    /// `node` cut off from every other node (both ways).
    pub fn isolation(&self, minority: &[usize]) -> Vec<(usize, usize)> {
        let mut pairs = Vec::new();
        for &inside in minority {
            for outside in (1..=self.nodes).filter(|node| !minority.contains(node)) {
                pairs.push((inside, outside));
                pairs.push((outside, inside));
            }
        }
        pairs
    }

    /// Drops `percent` of the packets between `node` and its peers, each
    /// way; 0 removes the rule.
    pub fn set_loss(&self, node: usize, percent: u32) -> Result<(), NetError> {
        assert!(percent <= 100, "{percent}%");
        let peers = self.peers(node).join(", ");
        let rules = if percent == 0 {
            String::new()
        } else {
            format!(
                "  chain input {{ type filter hook input priority -10; ip saddr {{ {peers} }} numgen random mod 100 < {percent} drop; }}\n\
                 \x20 chain output {{ type filter hook output priority -10; ip daddr {{ {peers} }} numgen random mod 100 < {percent} drop; }}\n"
            )
        };
        let script =
            format!("table inet loss\ndelete table inet loss\ntable inet loss {{\n{rules}}}\n");
        self.nft(&self.namespace(node), &script)
    }

    /// Starts the delay shim in `node`'s namespace (queue number `node`)
    /// and sends the node's packets to its peers through it. The rule
    /// bypasses the queue when the shim is gone, so a dead shim never
    /// partitions.
    pub fn start_delay(
        &self,
        node: usize,
        delay_ms: u32,
        jitter_ms: u32,
        seed: u64,
    ) -> Result<Child, NetError> {
        let exe = std::env::current_exe().map_err(|source| NetError::Spawn {
            command: "current_exe".into(),
            source,
        })?;
        let namespace = self.namespace(node);
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &namespace])
            .arg(exe)
            .args([
                "delay",
                "--queue",
                &node.to_string(),
                "--delay-ms",
                &delay_ms.to_string(),
                "--jitter-ms",
                &jitter_ms.to_string(),
                "--seed",
                &seed.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let mut child = command.spawn().map_err(|source| NetError::Spawn {
            command: "tern-faults delay".into(),
            source,
        })?;
        // The shim says "bound" once its queue is bound: only then does the
        // rule go in (a rule before the bind would bypass the shim).
        let mut ready = String::new();
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
        std::io::BufRead::read_line(&mut stdout, &mut ready).map_err(|source| NetError::Spawn {
            command: "tern-faults delay".into(),
            source,
        })?;
        if ready.trim() != "bound" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(NetError::Command {
                command: "tern-faults delay".into(),
                detail: format!("said {ready:?} instead of \"bound\""),
            });
        }
        for peer in self.peers(node) {
            self.at(node, &self.queue_rule("-A", &peer, node))?;
        }
        Ok(child)
    }

    /// Removes the delay rules of `node` and stops its shim.
    pub fn stop_delay(&self, node: usize, mut shim: Child) -> Result<(), NetError> {
        for peer in self.peers(node) {
            self.at(node, &self.queue_rule("-D", &peer, node))?;
        }
        let _ = shim.kill();
        let _ = shim.wait();
        Ok(())
    }

    fn queue_rule<'a>(&self, operation: &'a str, peer: &'a str, node: usize) -> Vec<String> {
        [
            "iptables",
            operation,
            "OUTPUT",
            "-d",
            peer,
            "-j",
            "NFQUEUE",
            "--queue-num",
            &node.to_string(),
            "--queue-bypass",
        ]
        .iter()
        .map(|part| part.to_string())
        .collect()
    }

    /// Runs `command` inside `node`'s namespace.
    pub fn at<S: AsRef<str>>(&self, node: usize, command: &[S]) -> Result<(), NetError> {
        let namespace = self.namespace(node);
        run(Command::new("ip")
            .args(["netns", "exec", &namespace])
            .args(command.iter().map(|part| part.as_ref())))
    }

    fn at_switch(&self, command: &[&str]) -> Result<(), NetError> {
        run(Command::new("ip")
            .args(["netns", "exec", &self.switch()])
            .args(command))
    }

    fn nft(&self, namespace: &str, script: &str) -> Result<(), NetError> {
        run_with_input(
            Command::new("ip").args(["netns", "exec", namespace, "nft", "-f", "-"]),
            Some(script),
        )
    }

    /// Deletes every namespace of this network (their links go with them).
    fn remove(&self) {
        for node in 1..=self.nodes {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.namespace(node)])
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch()])
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.remove();
    }
}

fn run(command: &mut Command) -> Result<(), NetError> {
    run_with_input(command, None)
}

/// Runs `command` to its end, `input` on its stdin; its stderr is the
/// error's detail (with the input, an nft script, appended).
fn run_with_input(command: &mut Command, input: Option<&str>) -> Result<(), NetError> {
    let rendered = format!("{command:?}");
    let spawn_failed = |source| NetError::Spawn {
        command: rendered.clone(),
        source,
    };
    let mut child = command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_failed)?;
    if let Some(input) = input {
        let written = child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(input.as_bytes());
        match written {
            // A command that exits before reading all of it: its exit
            // status says what happened.
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
            written => written.map_err(spawn_failed)?,
        }
    }
    let output = child.wait_with_output().map_err(spawn_failed)?;
    if !output.status.success() {
        let mut detail = String::from_utf8_lossy(&output.stderr).trim().to_string();
        if let Some(input) = input {
            detail.push('\n');
            detail.push_str(input);
        }
        return Err(NetError::Command {
            command: rendered,
            detail,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_get_their_input_and_failures_their_stderr() {
        run_with_input(
            Command::new("sh").args(["-c", "read line; test \"$line\" = table"]),
            Some("table\n"),
        )
        .expect("the input arrives");
        let error = run_with_input(
            Command::new("sh").args(["-c", "echo refused >&2; exit 3"]),
            Some("chain\n"),
        )
        .expect_err("exit 3 fails");
        let NetError::Command { detail, .. } = error else {
            panic!("{error:?}")
        };
        assert_eq!(detail, "refused\nchain\n");
        run(&mut Command::new("true")).expect("true succeeds");
    }
}
