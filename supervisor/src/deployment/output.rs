//! A child's stdout and stderr: copied line by line into the supervisor's
//! log (`orders[17297] stdout: …`) and into the deployment's bounded
//! buffer of recent output, which `wfhost logs` reads.

mod recent;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tracing::info;

pub use recent::{Line, MAX_LINES, recent};

/// Longest child output line kept; the rest is cut.
const MAX_LOG_LINE: usize = 16 * 1024;

/// Read buffer of each output stream. tokio's `BufReader` default is
/// 8 KiB, zero-filled up front: two streams a child made it 1.6 MiB of an
/// idle 100-child supervisor (DESIGN §10). Lines longer than this are
/// gathered over several reads; each line costs a log write anyway.
const LOG_READ_BYTES: usize = 1024;

/// Copies a child's output line by line into the log and the deployment's
/// recent output, cutting lines longer than [`MAX_LOG_LINE`].
pub async fn log_lines(
    stream: impl AsyncRead + Unpin,
    deployment: String,
    pid: u32,
    which: &'static str,
) {
    let buffer = recent(&deployment);
    let mut reader = BufReader::with_capacity(LOG_READ_BYTES, stream);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let mut cut = false;
        loop {
            let available = match reader.fill_buf().await {
                Ok(b) => b,
                Err(_) => return,
            };
            if available.is_empty() {
                if line.is_empty() {
                    return;
                }
                break;
            }
            let (take, done) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            let room = MAX_LOG_LINE.saturating_sub(line.len());
            line.extend_from_slice(&available[..take.min(room)]);
            cut |= take > room;
            reader.consume(take);
            if done {
                break;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if cut {
            info!(deployment = %deployment, pid, stream = which, cut_at = MAX_LOG_LINE, "{text}");
        } else {
            info!(deployment = %deployment, pid, stream = which, "{text}");
        }
        buffer.push(pid, which, text, cut);
    }
}
