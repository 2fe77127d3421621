//! The control socket spoken directly (protocol 2, docs/control.md), for
//! tests that send mail faster than one `wfhost send` process per item.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use serde_json::{Value, json};

fn write_message(s: &mut UnixStream, v: &Value) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(v)?;
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    s.write_all(&len.to_be_bytes())?;
    s.write_all(&bytes)
}

fn read_message(s: &mut UnixStream) -> std::io::Result<Value> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut buf)?;
    Ok(serde_json::from_slice(&buf)?)
}

/// Sends one mail item to `deployment` over the control socket at
/// `socket`; its id, or the refusal.
pub fn send(socket: &Path, deployment: &str, payload: &[u8]) -> Result<u64, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    let request = json!({
        "v": 2, "cmd": "send", "deployment": deployment, "payload_bytes": payload.len(),
    });
    write_message(&mut s, &request).map_err(|e| format!("write: {e}"))?;
    s.write_all(payload).map_err(|e| format!("write: {e}"))?;
    let answer = read_message(&mut s).map_err(|e| format!("read: {e}"))?;
    answer["data"]["id"]
        .as_u64()
        .ok_or_else(|| format!("send refused: {answer}"))
}

/// One `send` of `payload` under idempotency `key`, tried once: the
/// supervisor's whole answer (`ok`, `data`, or `error` and `outcome`).
pub fn send_keyed(socket: &Path, deployment: &str, payload: &[u8], key: &str) -> Value {
    let mut s = UnixStream::connect(socket).expect("connect to the control socket");
    let request = json!({
        "v": 2, "cmd": "send", "deployment": deployment, "payload_bytes": payload.len(), "key": key,
    });
    write_message(&mut s, &request).expect("write the request");
    s.write_all(payload).expect("write the payload");
    read_message(&mut s).expect("read the answer")
}

/// One control connection kept for many requests, as an SDK producer
/// keeps it (docs/control.md "One connection, many requests").
pub struct Connection(UnixStream);

impl Connection {
    /// Connects to the control socket at `socket`.
    pub fn open(socket: &Path) -> std::io::Result<Self> {
        UnixStream::connect(socket).map(Self)
    }

    /// Sends `request` (and `payload` after it) and reads the answer.
    pub fn ask(&mut self, request: &Value, payload: &[u8]) -> std::io::Result<Value> {
        write_message(&mut self.0, request)?;
        self.0.write_all(payload)?;
        read_message(&mut self.0)
    }

    /// Whether the supervisor closed the connection (reads its end; a
    /// close with bytes of ours unread is a reset on Linux).
    pub fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.0.read(&mut byte) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}
