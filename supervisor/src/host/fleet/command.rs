//! Commands from the supervisor and the control socket: stop, move a
//! deployment to another host, reload.

use std::sync::Arc;

use tracing::info;

use super::{Leases, State, tell};
use crate::config::DeploymentConfig;
use crate::config::changes::ReloadSummary;
use crate::deployment::Ask;
use crate::fleet::Command;

impl Leases {
    /// A command from the supervisor or the control socket.
    pub(super) fn command(&mut self, command: Command) {
        match command {
            Command::Stop => self.stop(),
            Command::Move {
                deployment,
                to,
                reply,
            } => {
                if to == self.fleet.host() {
                    let _ = reply.send(Err(format!("{deployment} already runs on {to}")));
                    return;
                }
                info!(deployment = %deployment, to = %to, "handing off to another host");
                self.hand_off(&deployment, "move", Some(to), Some(reply));
            }
            Command::Reload { deployments, reply } => {
                let _ = reply.send(self.reload(&deployments));
            }
        }
    }

    /// Drains every deployment held; each lease is released as its task ends.
    fn stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.round_now = true;
        let running: Vec<String> = self
            .held
            .iter()
            .filter(|(_, e)| matches!(e.state, State::Running))
            .map(|(d, _)| d.clone())
            .collect();
        info!(host = %self.fleet.host(), deployments = running.len(), "leaving the fleet: draining every deployment held here, releasing each lease as its child is gone");
        for d in running {
            self.hand_off(&d, "stop", None, None);
        }
    }

    /// Applies a reload to the deployments held here.
    fn reload(&mut self, deployments: &[DeploymentConfig]) -> ReloadSummary {
        let before = self.fleet.deployments();
        self.fleet.configure(deployments);
        let mut summary = ReloadSummary::default();
        for d in deployments {
            if !before.contains(&d.id) {
                summary.added.push(d.id.clone());
            }
        }
        let held: Vec<String> = self.held.keys().cloned().collect();
        for id in held {
            match deployments.iter().find(|d| d.id == id) {
                None => {
                    summary.removed.push(id.clone());
                    self.hand_off(&id, "removed", None, None);
                }
                Some(new) => {
                    let Some(e) = self.held.get(&id) else {
                        continue;
                    };
                    if *e.handle.config() != *new {
                        let mut same = (*e.handle.config()).clone();
                        same.replicas = new.replicas;
                        same.recycle.overlap = new.recycle.overlap;
                        same.hosts.clone_from(&new.hosts);
                        let recycle = same != *new;
                        e.handle.reconfigure(Arc::new(new.clone()));
                        tell(&e.handle, Ask::Reconfigured { recycle });
                        summary.changed.push(id.clone());
                    }
                }
            }
        }
        self.round_now = true;
        summary
    }
}
