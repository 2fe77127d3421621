//! `wfh-testchild MODE`: workflow children that misbehave on purpose, for
//! black-box tests of the supervisor. Each speaks the raw protocol, version 2 (`asker`: 3), over the
//! inherited control fd (`WFHOST_CONTROL_FD`, normally 3).
//!
//! Every mode first prints the fds it was started with
//! (`wfh-testchild fds at start: 0,1,2,3`), before anything opens more, so
//! tests can check what the supervisor let it inherit.
//!
//! | mode | behaviour |
//! |---|---|
//! | `garbage` | first frame is undecodable bytes, then sleeps forever |
//! | `protocol-1` | a `Hello` of protocol 1 (no `takes_mail`, no `implementation`), then sleeps forever |
//! | `wrong-channel` | `Hello` with another channel id, then sleeps forever |
//! | `no-ready` | proper `Hello`, reads `Welcome`, never sends `Ready`, answers nothing |
//! | `ignore-term` | ignores SIGTERM, handshake and `Ready`, answers `Ping`, runs forever |
//! | `outlive` | like `ignore-term`, and clears its parent-death signal so it outlives a killed supervisor |
//! | `well-behaved` | handshake and `Ready`, answers `Ping`, acks mail, `Drained` on drain, exits 0 on `Shutdown`, EOF or SIGTERM |
//! | `recycle-loop` | like `well-behaved`, and sends `RecycleRequest` right after every `Ready` |
//! | `step-flood` | like `well-behaved`, after `Ready` first sends `WFH_FLOOD` (9000) `StepStarted` of one run, names `WFH_NAME_CHARS` (8) long |
//! | `custom-flood` | like `well-behaved`, after `Ready` first sends `WFH_FLOOD` (9000) `Custom` events, kinds `WFH_NAME_CHARS` (8) long |
//! | `slow-ready` | like `well-behaved`, but sends `Ready` only 1 s after `Welcome` |
//! | `last-words` | handshake and `Ready`; on its first mail reports run `mail-ID` (step `work` started and finished, run terminal), acks it, and exits 0 at once |
//! | `worker` | handshake and `Ready`; works its mail one item at a time, `WFH_WORK_MS` (5) each, acking each and printing `wfh-testchild worker id=ID pid=PID at_ms=T`; on `Drain` it finishes what it holds, winds down for `WFH_DRAIN_MS` (2000), then sends `Drained` |
//! | `asker` | protocol 3: handshake and `Ready`, answers `Ping`, `Drained` on drain; starts every mail item and does what its payload says: `ask-flood` sends `WFH_FLOOD` (10000) `Ask`s of distinct keys, `ask-huge` one `Ask` with a 512 KiB prompt, `progress-flood` `WFH_FLOOD` `Progress` reports then ends the item, anything else ends it at once |
//! | `poison` | like `well-behaved`, and prints `wfh-testchild poison mail id=ID attempt=N payload=TEXT` for every mail; payload `poison` makes it exit 3 at once (unless the file `$WFH_CURED` exists), a payload starting with `hold` is never acknowledged |

use std::os::fd::{FromRawFd, RawFd};
use std::process::ExitCode;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use wfhost_ipc::handshake::{CONTROL_FD, ENV_CHANNEL_ID, ENV_CONTROL_FD};
use wfhost_ipc::{
    Control, DEFAULT_MAX_FRAME_BYTES, DrainBehavior, Event, FrameReader, FrameWriter, Hello,
    OLDEST_PROTOCOL, Outcome, PROTOCOL_VERSION,
};

const USAGE: &str = "usage: wfh-testchild garbage|protocol-1|wrong-channel|no-ready|ignore-term|recycle-loop|step-flood|custom-flood|outlive|well-behaved|slow-ready|last-words|worker|poison|asker";

/// The exit code of `poison` on its poison mail.
const POISONED: i32 = 3;

/// A frame with a valid length (4) whose body cannot decode: sequence 1,
/// then variant 200 of an enum with ten.
const GARBAGE: [u8; 8] = [0, 0, 0, 4, 0x01, 0xC8, 0xFF, 0xFF];

/// How long `slow-ready` takes between `Welcome` and `Ready`.
const SLOW_READY: Duration = Duration::from_secs(1);

type Failure = String;

/// The fds open in this process, ascending (without the one that lists
/// them).
fn open_fds() -> String {
    let listing = format!("/proc/{}/fd", std::process::id());
    let mut fds: Vec<u32> = std::fs::read_dir("/proc/self/fd")
        .map(|dir| {
            dir.filter_map(|e| {
                let e = e.ok()?;
                let target = std::fs::read_link(e.path()).ok()?;
                if target.as_os_str() == listing.as_str() {
                    return None;
                }
                e.file_name().to_str()?.parse().ok()
            })
            .collect()
        })
        .unwrap_or_default();
    fds.sort_unstable();
    let list: Vec<String> = fds.iter().map(u32::to_string).collect();
    list.join(",")
}

fn main() -> ExitCode {
    eprintln!("wfh-testchild fds at start: {}", open_fds());
    let mode = std::env::args().nth(1).unwrap_or_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wfh-testchild: cannot start tokio: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match mode.as_str() {
            "garbage" => garbage().await,
            "protocol-1" => protocol_1().await,
            "wrong-channel" => wrong_channel().await,
            "no-ready" => no_ready().await,
            "ignore-term" => ignore_term().await,
            "outlive" => outlive().await,
            "well-behaved" => well_behaved(Duration::ZERO, Vec::new()).await,
            "recycle-loop" => well_behaved(Duration::ZERO, recycle_loop()).await,
            "step-flood" => well_behaved(Duration::ZERO, step_flood()).await,
            "custom-flood" => well_behaved(Duration::ZERO, custom_flood()).await,
            "slow-ready" => well_behaved(SLOW_READY, Vec::new()).await,
            "last-words" => last_words().await,
            "poison" => poison().await,
            "worker" => worker().await,
            "asker" => asker().await,
            _ => Err(format!("unknown mode {mode:?}\n{USAGE}")),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wfh-testchild {mode}: {e}");
            ExitCode::from(2)
        }
    }
}

/// Takes the inherited control fd as a tokio stream.
fn control_stream() -> Result<UnixStream, Failure> {
    let fd: RawFd = match std::env::var(ENV_CONTROL_FD) {
        Ok(text) => text
            .trim()
            .parse()
            .map_err(|e| format!("{ENV_CONTROL_FD}={text:?}: {e}"))?,
        Err(_) => CONTROL_FD,
    };
    // SAFETY: F_GETFD only reads the descriptor's flags.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(format!(
            "fd {fd} is not open ({}); run me under `wfhost supervise`",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: fd is open, inherited for this purpose, and taken only here.
    let std_stream = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    std_stream
        .set_nonblocking(true)
        .map_err(|e| format!("fd {fd}: {e}"))?;
    UnixStream::from_std(std_stream).map_err(|e| format!("fd {fd}: {e}"))
}

fn channel_id() -> Result<String, Failure> {
    std::env::var(ENV_CHANNEL_ID).map_err(|_| format!("{ENV_CHANNEL_ID} is not set"))
}

/// A Hello of protocol 2: these children speak the version deployed
/// before 3, so every take is a start (and the supervisor's support for
/// them stays tested).
fn hello(channel_id: String) -> Event {
    hello_of(OLDEST_PROTOCOL, channel_id)
}

/// A Hello of `protocol`.
fn hello_of(protocol: u32, channel_id: String) -> Event {
    Event::Hello(Hello {
        protocol,
        channel_id,
        pid: std::process::id(),
        takes_mail: true,
        implementation: "wfh-testchild".into(),
    })
}

/// Sends `events` in batches of about 64 KiB (a flood as fast as the
/// channel takes it).
async fn send_all(writer: &mut FrameWriter<Event>, events: Vec<Event>) -> Result<(), Failure> {
    for event in events {
        writer
            .queue(event)
            .map_err(|e| format!("cannot queue: {e}"))?;
        if writer.queued_bytes() > 64 << 10 {
            writer
                .flush()
                .await
                .map_err(|e| format!("send failed: {e}"))?;
        }
    }
    writer
        .flush()
        .await
        .map_err(|e| format!("send failed: {e}"))
}

async fn send(writer: &mut FrameWriter<Event>, event: Event) -> Result<(), Failure> {
    writer
        .send(event)
        .await
        .map_err(|e| format!("send failed: {e}"))
}

/// Hello (protocol 2), Welcome, and (when `ready`) Ready.
async fn handshake(ready: bool) -> Result<(FrameReader<Control>, FrameWriter<Event>), Failure> {
    handshake_of(OLDEST_PROTOCOL, ready).await
}

/// Hello of `protocol`, Welcome, and (when `ready`) Ready.
async fn handshake_of(
    protocol: u32,
    ready: bool,
) -> Result<(FrameReader<Control>, FrameWriter<Event>), Failure> {
    let (mut reader, mut writer) =
        wfhost_ipc::split::<Control, Event>(control_stream()?, DEFAULT_MAX_FRAME_BYTES);
    send(&mut writer, hello_of(protocol, channel_id()?)).await?;
    match reader.next().await {
        Ok(Some(Control::Welcome(_))) => {}
        Ok(Some(other)) => return Err(format!("expected Welcome, got {}", other.name())),
        Ok(None) => return Err("channel closed before Welcome".into()),
        Err(e) => return Err(format!("reading Welcome: {e}")),
    }
    if ready {
        send(&mut writer, Event::Ready).await?;
    }
    Ok((reader, writer))
}

async fn forever() -> Result<(), Failure> {
    std::future::pending::<()>().await;
    Ok(())
}

async fn garbage() -> Result<(), Failure> {
    let mut stream = control_stream()?;
    stream
        .write_all(&GARBAGE)
        .await
        .map_err(|e| format!("write failed: {e}"))?;
    forever().await
}

/// A child of protocol 1: its Hello has no `takes_mail` or
/// `implementation`, so a protocol-2 decoder cannot decode it.
async fn protocol_1() -> Result<(), Failure> {
    let channel = channel_id()?;
    // seq 1, Hello (variant 0), protocol 1, the channel id, pid 7.
    let mut body = vec![1, 0, 1, channel.len() as u8];
    body.extend_from_slice(channel.as_bytes());
    body.push(7);
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut stream = control_stream()?;
    stream
        .write_all(&frame)
        .await
        .map_err(|e| format!("write failed: {e}"))?;
    forever().await
}

async fn wrong_channel() -> Result<(), Failure> {
    let (_reader, mut writer) =
        wfhost_ipc::split::<Control, Event>(control_stream()?, DEFAULT_MAX_FRAME_BYTES);
    let real = channel_id().unwrap_or_default();
    // Another valid-looking id: the real one reversed, or a fixed one.
    let mut other: String = real.chars().rev().collect();
    if other == real || other.is_empty() {
        other = "00000000000000000000000000000001".into();
    }
    send(&mut writer, hello(other)).await?;
    forever().await
}

async fn no_ready() -> Result<(), Failure> {
    let (_reader, _writer) = handshake(false).await?;
    forever().await
}

async fn ignore_term() -> Result<(), Failure> {
    // SAFETY: setting a signal disposition to SIG_IGN before any thread
    // depends on SIGTERM.
    if unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(format!(
            "cannot ignore SIGTERM: {}",
            std::io::Error::last_os_error()
        ));
    }
    let (mut reader, mut writer) = handshake(true).await?;
    println!("wfh-testchild ignore-term ready pid={}", std::process::id());
    loop {
        match reader.next().await {
            Ok(Some(Control::Ping { nonce })) => {
                if writer.send(Event::Pong { nonce }).await.is_err() {
                    return forever().await;
                }
            }
            Ok(Some(_)) => {}
            // The supervisor is gone or hung up: keep running regardless.
            Ok(None) | Err(_) => return forever().await,
        }
    }
}

async fn outlive() -> Result<(), Failure> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot clear the parent-death signal: {}",
            std::io::Error::last_os_error()
        ));
    }
    ignore_term().await
}

/// `RecycleRequest` right after `Ready`, every time: a child in a loop.
fn recycle_loop() -> Vec<Event> {
    vec![Event::RecycleRequest {
        reason: "again".into(),
    }]
}

/// How many frames a flood sends (`WFH_FLOOD`), and how long each name
/// is (`WFH_NAME_CHARS`).
fn flood_size() -> (usize, usize) {
    let var = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (var("WFH_FLOOD", 9_000), var("WFH_NAME_CHARS", 8))
}

/// Many valid `StepStarted` frames (one run, distinct steps) after `Ready`.
fn step_flood() -> Vec<Event> {
    let (n, chars) = flood_size();
    (0..n)
        .map(|i| Event::StepStarted {
            run: "flood".into(),
            step: format!("{i:0>chars$}"),
            drain: DrainBehavior::Wait,
        })
        .collect()
}

/// Many small `Custom` frames after `Ready`.
fn custom_flood() -> Vec<Event> {
    let (n, chars) = flood_size();
    (0..n)
        .map(|i| Event::Custom {
            kind: format!("{i:0>chars$}"),
            bytes: vec![1, 2, 3],
        })
        .collect()
}

async fn well_behaved(ready_after: Duration, after_ready: Vec<Event>) -> Result<(), Failure> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let (mut reader, mut writer) = handshake(false).await?;
    tokio::time::sleep(ready_after).await;
    send(&mut writer, Event::Ready).await?;
    println!(
        "wfh-testchild well-behaved ready pid={}",
        std::process::id()
    );
    send_all(&mut writer, after_ready).await?;
    loop {
        let message = tokio::select! {
            _ = term.recv() => return Ok(()),
            message = reader.next() => message,
        };
        match message {
            Ok(Some(Control::Ping { nonce })) => send(&mut writer, Event::Pong { nonce }).await?,
            Ok(Some(Control::Mail { id, .. })) => {
                let ack = Event::MailAck {
                    id,
                    outcome: Outcome::Succeeded,
                };
                send(&mut writer, ack).await?;
            }
            Ok(Some(Control::Drain { .. })) => send(&mut writer, Event::Drained).await?,
            Ok(Some(Control::Shutdown)) | Ok(None) => return Ok(()),
            Ok(Some(
                Control::Cancel(_)
                | Control::Welcome(_)
                | Control::Lease { .. }
                | Control::CancelMail(_)
                | Control::Answer { .. },
            )) => {}
            Err(e) => return Err(format!("control channel: {e}")),
        }
    }
}

/// A protocol-3 child whose handlers ask too much, or report too much.
async fn asker() -> Result<(), Failure> {
    let (mut reader, mut writer) = handshake_of(PROTOCOL_VERSION, true).await?;
    let flood = std::env::var("WFH_FLOOD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000u32);
    loop {
        match reader.next().await {
            Ok(Some(Control::Ping { nonce })) => send(&mut writer, Event::Pong { nonce }).await?,
            Ok(Some(Control::Mail { id, payload, .. })) => {
                let started = Event::MailStarted {
                    id,
                    cancellable: true,
                };
                send(&mut writer, started).await?;
                let mut events = Vec::new();
                match payload.as_slice() {
                    b"ask-flood" => events.extend((0..flood).map(|n| Event::Ask {
                        id,
                        key: format!("q{n}"),
                        prompt: b"{}".to_vec(),
                    })),
                    b"ask-huge" => {
                        let mut prompt = vec![b'p'; 512 << 10];
                        prompt[0] = b'"';
                        prompt[(512 << 10) - 1] = b'"';
                        events.push(Event::Ask {
                            id,
                            key: "huge".into(),
                            prompt,
                        });
                    }
                    b"progress-flood" => {
                        events.extend((0..flood).map(|n| Event::Progress {
                            id,
                            data: format!("{{\"n\":{n}}}").into_bytes(),
                        }));
                        events.push(Event::MailDone {
                            id,
                            outcome: Outcome::Succeeded,
                            result: Vec::new(),
                        });
                    }
                    _ => events.push(Event::MailDone {
                        id,
                        outcome: Outcome::Succeeded,
                        result: Vec::new(),
                    }),
                }
                send_all(&mut writer, events).await?;
            }
            Ok(Some(Control::Drain { .. })) => send(&mut writer, Event::Drained).await?,
            Ok(Some(Control::Shutdown)) | Ok(None) => return Ok(()),
            Ok(Some(_)) => {}
            Err(e) => return Err(format!("control channel: {e}")),
        }
    }
}

/// Milliseconds from the environment variable `name`, else `default`.
fn env_ms(name: &str, default: u64) -> Duration {
    Duration::from_millis(
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// A worker that takes time per item and winds down slowly on a drain.
async fn worker() -> Result<(), Failure> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let (work, wind_down) = (env_ms("WFH_WORK_MS", 5), env_ms("WFH_DRAIN_MS", 2000));
    let (mut reader, mut writer) = handshake(true).await?;
    let mut queue = std::collections::VecDeque::new();
    let mut draining = false;
    let mut busy_until: Option<tokio::time::Instant> = None;
    loop {
        let due =
            busy_until.or_else(|| (!queue.is_empty()).then(|| tokio::time::Instant::now() + work));
        busy_until = due;
        let finish = async {
            match due {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = term.recv() => return Ok(()),
            () = finish => {
                busy_until = None;
                if let Some(id) = queue.pop_front() {
                    println!(
                        "wfh-testchild worker id={id} pid={} at_ms={}",
                        std::process::id(),
                        std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_millis())
                    );
                    send(&mut writer, Event::MailAck { id, outcome: Outcome::Succeeded }).await?;
                }
                if draining && queue.is_empty() {
                    tokio::time::sleep(wind_down).await;
                    send(&mut writer, Event::Drained).await?;
                    draining = false;
                }
            }
            message = reader.next() => match message {
                Ok(Some(Control::Ping { nonce })) => send(&mut writer, Event::Pong { nonce }).await?,
                Ok(Some(Control::Mail { id, .. })) => queue.push_back(id),
                Ok(Some(Control::Drain { .. })) => {
                    if queue.is_empty() {
                        tokio::time::sleep(wind_down).await;
                        send(&mut writer, Event::Drained).await?;
                    } else {
                        draining = true;
                    }
                }
                Ok(Some(Control::Shutdown)) | Ok(None) => return Ok(()),
                Ok(Some(
                Control::Cancel(_)
                | Control::Welcome(_)
                | Control::Lease { .. }
                | Control::CancelMail(_)
                | Control::Answer { .. },
            )) => {}
                Err(e) => return Err(format!("control channel: {e}")),
            },
        }
    }
}

/// Acks mail like `well-behaved`, saying what it got; crashes on poison
/// (until cured), holds `hold…` mail forever.
async fn poison() -> Result<(), Failure> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch SIGTERM: {e}"))?;
    let (mut reader, mut writer) = handshake(true).await?;
    let cured = || std::env::var_os("WFH_CURED").is_some_and(|p| std::path::Path::new(&p).exists());
    loop {
        let message = tokio::select! {
            _ = term.recv() => return Ok(()),
            message = reader.next() => message,
        };
        match message {
            Ok(Some(Control::Ping { nonce })) => send(&mut writer, Event::Pong { nonce }).await?,
            Ok(Some(Control::Mail {
                id,
                attempt,
                payload,
            })) => {
                let text = String::from_utf8_lossy(&payload).into_owned();
                println!(
                    "wfh-testchild poison mail id={id} attempt={attempt} payload={text} pid={}",
                    std::process::id()
                );
                if text == "poison" && !cured() {
                    std::process::exit(POISONED);
                }
                if !text.starts_with("hold") {
                    let ack = Event::MailAck {
                        id,
                        outcome: Outcome::Succeeded,
                    };
                    send(&mut writer, ack).await?;
                }
            }
            Ok(Some(Control::Drain { .. })) => send(&mut writer, Event::Drained).await?,
            Ok(Some(Control::Shutdown)) | Ok(None) => return Ok(()),
            Ok(Some(
                Control::Cancel(_)
                | Control::Welcome(_)
                | Control::Lease { .. }
                | Control::CancelMail(_)
                | Control::Answer { .. },
            )) => {}
            Err(e) => return Err(format!("control channel: {e}")),
        }
    }
}

/// Its last frames are written, then it exits without waiting: they sit in
/// the socket while the supervisor learns of the exit.
async fn last_words() -> Result<(), Failure> {
    let (mut reader, mut writer) = handshake(true).await?;
    loop {
        match reader.next().await {
            Ok(Some(Control::Ping { nonce })) => send(&mut writer, Event::Pong { nonce }).await?,
            Ok(Some(Control::Mail { id, .. })) => {
                let run = format!("mail-{id}");
                let step = "work".to_owned();
                let succeeded = Outcome::Succeeded;
                let last = [
                    Event::StepStarted {
                        run: run.clone(),
                        step: step.clone(),
                        drain: DrainBehavior::Cancel,
                    },
                    Event::StepFinished {
                        run: run.clone(),
                        step,
                        outcome: succeeded.clone(),
                    },
                    Event::RunTerminal {
                        run,
                        outcome: succeeded.clone(),
                    },
                    Event::MailAck {
                        id,
                        outcome: succeeded,
                    },
                ];
                for event in last {
                    writer
                        .queue(event)
                        .map_err(|e| format!("queue failed: {e}"))?;
                }
                writer
                    .flush()
                    .await
                    .map_err(|e| format!("flush failed: {e}"))?;
                std::process::exit(0);
            }
            Ok(Some(_)) => {}
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("control channel: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use wfhost_ipc::{FrameDecoder, ProtocolViolation};

    use super::*;

    #[test]
    fn garbage_passes_the_length_check_but_not_the_decoder() {
        let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
        match decoder.decode_one::<Event>(&GARBAGE) {
            Err(ProtocolViolation::Undecodable(_)) => {}
            other => panic!("expected an undecodable body, got {other:?}"),
        }
    }
}
