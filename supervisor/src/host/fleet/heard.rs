//! What the fleet's notification listener heard: mail, events, released
//! leases, forwarded requests and answers, and the listener coming and going.

use tracing::{info, warn};

use super::{Leases, State, tell};
use crate::deployment::Ask;
use crate::store::postgres::listen::Heard;

impl Leases {
    /// What the listener heard.
    pub(super) fn hear(&mut self, heard: Heard) {
        match heard {
            Heard::Note { channel, payload } => match channel.as_str() {
                "wfhost_mail" => {
                    if let Some(e) = self.held.get(&payload)
                        && matches!(e.state, State::Running)
                    {
                        tell(&e.handle, Ask::MailArrived);
                    }
                }
                "wfhost_events" => self.shared.events_written(),
                "wfhost_lease" => self.round_now = true,
                "wfhost_request" if payload == self.fleet.host() => self.serve_requests(),
                "wfhost_answer" => {
                    if let Ok(id) = payload.parse() {
                        self.fleet.answer_arrived(id);
                    }
                }
                _ => {}
            },
            Heard::Listening => {
                if self.listening {
                    info!("listening for the fleet's notifications again");
                }
                self.listening = true;
                // Whatever was notified meanwhile is gone: look.
                self.round_now = true;
                self.shared.events_written();
                for e in self.held.values() {
                    tell(&e.handle, Ask::MailArrived);
                }
                self.serve_requests();
            }
            Heard::Lost(error) => {
                if std::mem::take(&mut self.listening) {
                    warn!(error = %error, "lost the connection that listens for the fleet's notifications; reconnecting");
                }
            }
        }
    }

    /// Answers the requests forwarded to this host, each on a task of its
    /// own (a recycle can take a while).
    pub(super) fn serve_requests(&mut self) {
        (self.answer_forwarded)();
    }
}
