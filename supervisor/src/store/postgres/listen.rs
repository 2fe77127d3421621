//! `LISTEN` on a connection of its own, on a thread of its own (the
//! client blocks): every notification is handed to the async side as it
//! arrives, so a host wakes at once for mail, events, released leases and
//! forwarded requests instead of polling. A lost connection is made again
//! with a growing pause, and each new one is announced, since whatever was
//! notified meanwhile is gone and the listener must look for itself.

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use tokio::sync::mpsc;

use super::Target;

/// What the listener hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A notification on `channel` with its payload.
    Note {
        /// The channel.
        channel: String,
        /// The payload.
        payload: String,
    },
    /// A (new) connection listens: anything sent before it was missed.
    Listening,
    /// The connection was lost (or could not be made), and why.
    Lost(String),
}

/// How long one wait for notifications lasts before the connection is
/// probed (a partition shows as a probe that fails).
const WAIT: Duration = Duration::from_millis(500);
/// The longest pause between reconnection attempts.
const MAX_PAUSE: Duration = Duration::from_secs(2);

/// Starts a thread that listens on `channels` of the database `url`
/// names (with `tune` applied to the connection) until `heard` is closed.
pub fn spawn(
    url: &str,
    tune: Box<dyn Fn(&mut postgres::Config) + Send>,
    channels: &'static [&'static str],
    heard: mpsc::UnboundedSender<Heard>,
) -> std::io::Result<()> {
    let target = Target::new(url, &*tune).map_err(|e| std::io::Error::other(e.to_string()));
    std::thread::Builder::new()
        .name("wfhost-listen".into())
        .spawn(move || {
            let mut target = match target {
                Ok(c) => c,
                Err(e) => {
                    let _ = heard.send(Heard::Lost(e.to_string()));
                    return;
                }
            };
            target.config_mut().application_name("wfhost-listen");
            let mut pause = Duration::from_millis(50);
            while !heard.is_closed() {
                match listen(&target, channels, &heard) {
                    Ok(()) => return,
                    Err(e) => {
                        if heard.send(Heard::Lost(e)).is_err() {
                            return;
                        }
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(MAX_PAUSE);
                    }
                }
            }
        })
        .map(drop)
}

/// Listens on one connection until it fails (the error) or nobody hears
/// any more (`Ok`).
fn listen(
    target: &Target,
    channels: &[&str],
    heard: &mpsc::UnboundedSender<Heard>,
) -> Result<(), String> {
    let (mut client, _) = target.connect().map_err(|e| e.to_string())?;
    let listen: String = channels.iter().map(|c| format!("LISTEN {c};")).collect();
    client.batch_execute(&listen).map_err(|e| e.to_string())?;
    if heard.send(Heard::Listening).is_err() {
        return Ok(());
    }
    loop {
        let mut quiet = true;
        {
            let mut notes = client.notifications();
            let mut iter = notes.timeout_iter(WAIT);
            while let Some(note) = iter.next().map_err(|e| e.to_string())? {
                quiet = false;
                let note = Heard::Note {
                    channel: note.channel().to_owned(),
                    payload: note.payload().to_owned(),
                };
                if heard.send(note).is_err() {
                    return Ok(());
                }
            }
        }
        if heard.is_closed() {
            return Ok(());
        }
        if quiet {
            client.simple_query("").map_err(|e| e.to_string())?;
        }
    }
}
