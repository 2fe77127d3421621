//! Speaking the control socket (control protocol 2) straight from a
//! benchmark, so figures are the supervisor's and not the CLI's process
//! start: one request and its answer, mail sent, an `events --follow`
//! stream, a call (a keyed `send`, then `mail-result` with a wait).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// One request and its answer; `payload` follows a `send`.
pub fn call(socket: &Path, request: &Value, payload: &[u8]) -> anyhow::Result<Value> {
    let mut s = UnixStream::connect(socket).context("connecting to the control socket")?;
    write_message(&mut s, request)?;
    s.write_all(payload)?;
    read_message(&mut s)
}

fn write_message(s: &mut UnixStream, v: &Value) -> anyhow::Result<()> {
    let bytes = serde_json::to_vec(v)?;
    s.write_all(&u32::try_from(bytes.len())?.to_be_bytes())?;
    s.write_all(&bytes)?;
    Ok(())
}

fn read_message(s: &mut UnixStream) -> anyhow::Result<Value> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut buf)?;
    Ok(serde_json::from_slice(&buf)?)
}

/// Sends one `{}` item to `deployment`; its id.
pub fn send(socket: &Path, deployment: &str) -> anyhow::Result<u64> {
    let payload = b"{}";
    let answer = call(
        socket,
        &json!({"v": 2, "cmd": "send", "deployment": deployment, "payload_bytes": payload.len()}),
        payload,
    )?;
    answer["data"]["id"]
        .as_u64()
        .with_context(|| format!("send refused: {answer}"))
}

/// A keyed `send` of `payload` to `deployment` (what `wfhost send` and
/// `wfhost call` send); the item's id and whether it is new.
pub fn send_keyed(
    socket: &Path,
    deployment: &str,
    payload: &[u8],
    key: &str,
) -> anyhow::Result<(u64, bool)> {
    let answer = call(
        socket,
        &json!({"v": 2, "cmd": "send", "deployment": deployment, "payload_bytes": payload.len(), "key": key}),
        payload,
    )?;
    let id = answer["data"]["id"]
        .as_u64()
        .with_context(|| format!("send refused: {answer}"))?;
    Ok((id, answer["data"]["new"] == true))
}

/// `mail-result` of item `id`, answered when it ends or after `wait_ms`;
/// the answer's `data`.
pub fn mail_result(socket: &Path, id: u64, wait_ms: u64) -> anyhow::Result<Value> {
    let answer = call(
        socket,
        &json!({"v": 2, "cmd": "mail-result", "id": id, "wait_ms": wait_ms}),
        &[],
    )?;
    if answer["ok"] != true {
        bail!("mail-result {id} refused: {answer}");
    }
    Ok(answer["data"].clone())
}

/// One call, timed.
#[derive(Debug, Clone)]
pub struct Called {
    /// The item's id.
    pub id: u64,
    /// Whether the send made a new item (false: the key named one).
    pub new: bool,
    /// From the start to the send's answer (the mail durable).
    pub sent: Duration,
    /// From the start to `mail-result`'s answer.
    pub total: Duration,
    /// `mail-result`'s `data`: the item's end.
    pub end: Value,
}

/// What `wfhost call` does, over the socket: a keyed `send`, then
/// `mail-result` waiting `wait_ms` at most; fails when the item has not
/// ended by then.
pub fn call_item(
    socket: &Path,
    deployment: &str,
    payload: &[u8],
    key: &str,
    wait_ms: u64,
) -> anyhow::Result<Called> {
    let t = Instant::now();
    let (id, new) = send_keyed(socket, deployment, payload, key)?;
    let sent = t.elapsed();
    let end = mail_result(socket, id, wait_ms)?;
    let total = t.elapsed();
    if end["ended"] != true {
        bail!("mail {id} had not ended after {wait_ms} ms: {end}");
    }
    Ok(Called {
        id,
        new,
        sent,
        total,
        end,
    })
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

/// How a flood's senders reach the supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Senders {
    /// Each keeps one connection for all its sends, as the SDK clients do.
    Kept,
    /// Each send connects anew (a client of before issue 24, or the CLI).
    ConnectEach,
}

/// `senders` threads each sending `per_sender` `{}` items to `deployment`
/// as fast as they are answered; the time from the first send to the last
/// `mail_done`.
pub fn flood(
    socket: &Path,
    deployment: &str,
    senders: usize,
    per_sender: usize,
    how: Senders,
) -> anyhow::Result<Duration> {
    let mut follow = Follow::open(socket, last_seq(socket)?)?;
    let t = Instant::now();
    let threads: Vec<_> = (0..senders)
        .map(|_| {
            let (socket, deployment) = (socket.to_path_buf(), deployment.to_owned());
            std::thread::spawn(move || -> anyhow::Result<()> {
                let request =
                    json!({"v": 2, "cmd": "send", "deployment": deployment, "payload_bytes": 2});
                let mut kept = match how {
                    Senders::Kept => Some(UnixStream::connect(&socket)?),
                    Senders::ConnectEach => None,
                };
                for _ in 0..per_sender {
                    let answer = match kept.as_mut() {
                        Some(s) => {
                            write_message(s, &request)?;
                            s.write_all(b"{}")?;
                            read_message(s)?
                        }
                        None => call(&socket, &request, b"{}")?,
                    };
                    if answer["ok"] != true {
                        bail!("send refused: {answer}");
                    }
                }
                Ok(())
            })
        })
        .collect();
    let mut done = 0;
    follow.until(|e| {
        if e["kind"] == "mail_done" {
            done += 1;
        }
        done == senders * per_sender
    })?;
    let took = t.elapsed();
    for s in threads {
        s.join()
            .map_err(|_| anyhow::anyhow!("a sender panicked"))??;
    }
    Ok(took)
}
