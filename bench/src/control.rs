//! Speaking the control socket (control protocol 2) straight from a
//! benchmark, so figures are the supervisor's and not the CLI's process
//! start: one request and its answer, mail sent, an `events --follow`
//! stream.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use wfhost_tests::control::{read_message, write_message};

/// One request and its answer; `payload` follows a `send`.
pub fn call(socket: &Path, request: &Value, payload: &[u8]) -> anyhow::Result<Value> {
    let mut s = UnixStream::connect(socket).context("connecting to the control socket")?;
    write_message(&mut s, request)?;
    s.write_all(payload)?;
    Ok(read_message(&mut s)?)
}

/// Sends one `{}` item to `deployment`; its id.
pub fn send(socket: &Path, deployment: &str) -> anyhow::Result<u64> {
    wfhost_tests::control::send(socket, deployment, b"{}").map_err(anyhow::Error::msg)
}

/// `status`'s deployments.
pub fn status(socket: &Path) -> anyhow::Result<Vec<Value>> {
    let answer = call(socket, &json!({"v": 2, "cmd": "status"}), &[])?;
    match answer["data"]["deployments"].as_array() {
        Some(d) => Ok(d.clone()),
        None => bail!("status refused: {answer}"),
    }
}

/// An `events --follow` stream.
pub struct Follow(UnixStream);

impl Follow {
    /// Follows events after seq `after`.
    pub fn open(socket: &Path, after: u64) -> anyhow::Result<Self> {
        let mut s = UnixStream::connect(socket)?;
        // A stream that stalls is an error, not a benchmark that never ends.
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
        write_message(
            &mut s,
            &json!({"v": 2, "cmd": "events", "after": after, "follow": true}),
        )?;
        let started = read_message(&mut s)?;
        if started["ok"] != true {
            bail!("events refused: {started}");
        }
        Ok(Self(s))
    }

    /// Reads events until one `f` accepts.
    pub fn until(&mut self, mut f: impl FnMut(&Value) -> bool) -> anyhow::Result<Value> {
        loop {
            let event = read_message(&mut self.0)?;
            if f(&event) {
                return Ok(event);
            }
        }
    }
}

/// The highest event seq so far (followers start after it).
pub fn last_seq(socket: &Path) -> anyhow::Result<u64> {
    let mut s = UnixStream::connect(socket)?;
    write_message(
        &mut s,
        &json!({"v": 2, "cmd": "events", "after": 0, "follow": false}),
    )?;
    let mut last = 0;
    let _started = read_message(&mut s)?;
    while let Ok(event) = read_message(&mut s) {
        last = event["seq"].as_u64().unwrap_or(last);
    }
    Ok(last)
}
