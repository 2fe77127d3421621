//! DESIGN §10, figures 1 and 2: the control protocol through our stack.
//!
//! 1. **Ping→Pong round trip**: this process plays the supervisor (AF_UNIX
//!    socketpair, the real `wfhost-child exec -- sleep 1000` with the other
//!    end at fd 3 and the `WFHOST_*` environment, Hello/Welcome/Ready
//!    through `wfhost_ipc::split`), then times Ping→Pong. Reference, in the
//!    same run and interleaved in blocks: a raw blocking 64-byte ping-pong
//!    over a socketpair with a helper process (this executable re-run with
//!    a helper argument). Measured with every process on CPU 0 for the
//!    verdict, and again free-running.
//! 2. **Small-frame throughput child → supervisor**: a helper process sends
//!    N `Event::Pong` frames with `FrameWriter`, queued and flushed in
//!    64 KiB batches (as the child runtime's outbox does); this process
//!    reads them with `FrameReader`. References:
//!    encode and decode alone in one process, and raw one-`write`-per-frame
//!    of the same bytes (the syscall ceiling of a one-write-per-frame sender).

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use wfhost_bench::procs::{self, CleanupGuard};
use wfhost_bench::stats::{Summary, dur, rate};
use wfhost_bench::{Binaries, Report, Verdict};
use wfhost_ipc::handshake::{
    ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{
    Control, DEFAULT_MAX_FRAME_BYTES, Event, Frame, FrameDecoder, FrameReader, FrameWriter, Grants,
    Limits, Welcome, encode_frame, key,
};

/// The argument that turns this executable into a helper process.
const HELPER: &str = "--wfhost-bench-helper";

/// Round trips per block; blocks alternate reference and ours.
const RTT_PER_BLOCK: usize = 5_000;
const RTT_BLOCKS: usize = 4;
const RTT_WARMUP: usize = 1_000;

/// Frames per throughput run, and runs (the median is reported).
const FRAMES: u64 = 1_000_000;
const RUNS: usize = 5;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == HELPER) {
        return match helper(&args[i + 1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("wfhost-bench helper: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let bins = wfhost_bench::bins::locate();
    procs::become_subreaper();
    let cleanup = CleanupGuard;
    let started = Instant::now();
    let mut report = Report::new();
    eprintln!(
        "wfhost-bench protocol: {}",
        wfhost_bench::report::machine_line()
    );
    report.run(
        "1",
        "control round trip Ping→Pong, p50",
        "≤ 2× raw",
        |r| round_trip(&bins, r),
    );
    report.run(
        "2",
        "small-frame throughput child → supervisor",
        "≥ 1,000,000 frames/s",
        throughput,
    );
    drop(cleanup);
    report.note(
        "2",
        format!(
            "protocol suite took {:.1} s",
            started.elapsed().as_secs_f64()
        ),
    );
    print!(
        "{}",
        report.render("wfhost protocol benchmarks (DESIGN §10, figures 1–2)")
    );
    if report.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

// ---------------------------------------------------------------- helpers

/// The helper processes: `echo` (raw 64-byte ping-pong on fd 3), `send N`
/// (N Pong frames through `FrameWriter` on fd 3) and `rawsend N LEN` (N
/// writes of LEN bytes on fd 3). The senders print their CPU time and write
/// syscall count on stdout.
fn helper(args: &[String]) -> anyhow::Result<()> {
    // SAFETY: fd 3 was placed here by the parent for this purpose only.
    let fd3 = unsafe { OwnedFd::from_raw_fd(3) };
    let mut stream = StdUnixStream::from(fd3);
    let arg = |i: usize| -> anyhow::Result<u64> {
        args.get(i)
            .context("missing helper argument")?
            .parse()
            .context("bad helper argument")
    };
    match args.first().map(String::as_str) {
        Some("echo") => {
            let mut buf = [0u8; 64];
            while stream.read_exact(&mut buf).is_ok() {
                stream.write_all(&buf)?;
            }
            Ok(())
        }
        Some("send") => {
            let n = arg(1)?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                stream.set_nonblocking(true)?;
                let stream = tokio::net::UnixStream::from_std(stream)?;
                let (_reader, mut writer): (FrameReader<Control>, FrameWriter<Event>) =
                    wfhost_ipc::split(stream, DEFAULT_MAX_FRAME_BYTES);
                // As the child runtime's outbox does: queue a burst, write
                // it in one go.
                for nonce in 0..n {
                    writer.queue(Event::Pong { nonce })?;
                    if writer.queued_bytes() >= 64 * 1024 {
                        writer.flush().await?;
                    }
                }
                writer.close().await?;
                anyhow::Ok(())
            })?;
            print_sender_stats();
            Ok(())
        }
        Some("rawsend") => {
            let (n, len) = (arg(1)?, arg(2)? as usize);
            let frame = vec![7u8; len];
            for _ in 0..n {
                stream.write_all(&frame)?;
            }
            stream.shutdown(std::net::Shutdown::Write)?;
            print_sender_stats();
            Ok(())
        }
        other => bail!("unknown helper {other:?}"),
    }
}

fn print_sender_stats() {
    println!("cpu={}", procs::self_cpu_secs());
}

fn helper_command() -> anyhow::Result<Command> {
    let exe = std::env::current_exe().context("locating this bench executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg(HELPER).stdin(Stdio::null());
    Ok(cmd)
}

/// A child process killed and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let pid = self.0.id() as i32;
        // SAFETY: kill(2) of our child's process group and of the child.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
            libc::kill(pid, libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

// -------------------------------------------------------------- figure 1

/// The supervisor's side of a real `wfhost-child`.
struct Wired {
    _child: Killed,
    reader: FrameReader<Event>,
    writer: FrameWriter<Control>,
}

impl Wired {
    /// Spawns `wfhost-child exec -- sleep 1000` with fd 3 and the
    /// `WFHOST_*` environment, and does the handshake up to its first step.
    async fn start(child_bin: &std::path::Path) -> anyhow::Result<Self> {
        let (ours, theirs) = StdUnixStream::pair()?;
        let key = key::generate()?;
        let channel = wfhost_ipc::new_channel_id()
            .map_err(|e| anyhow::anyhow!("minting a channel id: {e}"))?;
        let mut cmd = Command::new(child_bin);
        cmd.args(["exec", "--", "sleep", "1000"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env(ENV_CONTROL_FD, "3")
            .env(ENV_CHANNEL_ID, &channel)
            .env(ENV_PROTOCOL, wfhost_ipc::PROTOCOL_VERSION.to_string())
            .env(ENV_DEPLOYMENT, "bench")
            .env(ENV_SUPERVISOR_KEY, key::public_hex(&key.verifying_key()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = Killed(procs::spawn_with_fd3(&mut cmd, theirs.into())?);
        ours.set_nonblocking(true)?;
        let stream = tokio::net::UnixStream::from_std(ours)?;
        let (mut reader, mut writer) =
            wfhost_ipc::split::<Event, Control>(stream, DEFAULT_MAX_FRAME_BYTES);
        match next(&mut reader).await? {
            Event::Hello(hello) => hello.check(&channel)?,
            other => bail!("expected Hello, got {other:?}"),
        }
        writer
            .send(Control::Welcome(Welcome {
                protocol: wfhost_ipc::PROTOCOL_VERSION,
                deployment: "bench".into(),
                grants_snapshot: Grants::default(),
                limits: Limits {
                    max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
                    max_mail_bytes: 256 << 10,
                    drain_timeout_ms: 60_000,
                    liveness_timeout_ms: 30_000,
                },
            }))
            .await?;
        match next(&mut reader).await? {
            Event::Ready => {}
            other => bail!("expected Ready, got {other:?}"),
        }
        match next(&mut reader).await? {
            Event::StepStarted { .. } => {}
            other => bail!("expected StepStarted, got {other:?}"),
        }
        Ok(Self {
            _child: child,
            reader,
            writer,
        })
    }

    /// Times `n` Ping→Pong round trips; nonces continue from `first`.
    async fn pings(&mut self, first: u64, n: usize, out: &mut Vec<f64>) -> anyhow::Result<()> {
        for nonce in first..first + n as u64 {
            let t = Instant::now();
            self.writer.send(Control::Ping { nonce }).await?;
            loop {
                match next(&mut self.reader).await? {
                    Event::Pong { nonce: got } if got == nonce => break,
                    Event::Pong { nonce: got } => bail!("Pong {got} for Ping {nonce}"),
                    _ => {}
                }
            }
            out.push(t.elapsed().as_secs_f64());
        }
        Ok(())
    }
}

async fn next(reader: &mut FrameReader<Event>) -> anyhow::Result<Event> {
    match tokio::time::timeout(Duration::from_secs(10), reader.next()).await {
        Ok(Ok(Some(event))) => Ok(event),
        Ok(Ok(None)) => bail!("wfhost-child closed the channel"),
        Ok(Err(e)) => bail!("wfhost-child broke the protocol: {e}"),
        Err(_) => bail!("no event from wfhost-child within 10 s"),
    }
}

fn raw_pings(stream: &mut StdUnixStream, n: usize, out: &mut Vec<f64>) -> anyhow::Result<()> {
    let mut buf = [0x5au8; 64];
    for _ in 0..n {
        let t = Instant::now();
        stream.write_all(&buf)?;
        stream.read_exact(&mut buf)?;
        out.push(t.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Samples of Ping→Pong through our stack and of the raw reference, taken
/// in alternating blocks with fresh helper processes.
fn rtt_samples(bins: &Binaries) -> anyhow::Result<(Summary, Summary)> {
    let (mut raw, theirs) = StdUnixStream::pair()?;
    let mut cmd = helper_command()?;
    cmd.arg("echo");
    let _echo = Killed(procs::spawn_with_fd3(&mut cmd, theirs.into())?);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut wired = rt.block_on(Wired::start(&bins.child))?;

    let (mut ours, mut reference) = (Vec::new(), Vec::new());
    raw_pings(&mut raw, RTT_WARMUP, &mut Vec::new())?;
    rt.block_on(wired.pings(0, RTT_WARMUP, &mut Vec::new()))?;
    let mut nonce = RTT_WARMUP as u64;
    for _ in 0..RTT_BLOCKS {
        raw_pings(&mut raw, RTT_PER_BLOCK, &mut reference)?;
        rt.block_on(wired.pings(nonce, RTT_PER_BLOCK, &mut ours))?;
        nonce += RTT_PER_BLOCK as u64;
    }
    Ok((
        Summary::of(&ours).context("no samples")?,
        Summary::of(&reference).context("no samples")?,
    ))
}

/// Runs `f` with this thread (and so every process it spawns meanwhile)
/// pinned to CPU 0, then restores the previous affinity.
fn on_one_cpu<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set, and the
    // calls get its exact size for the calling thread (pid 0).
    let mut old: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut old) } != 0 {
        bail!("sched_getaffinity: {}", std::io::Error::last_os_error());
    }
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(0, &mut one) };
    if unsafe { libc::sched_setaffinity(0, size, &one) } != 0 {
        bail!("sched_setaffinity: {}", std::io::Error::last_os_error());
    }
    let result = f();
    // SAFETY: as above, with the set read before.
    if unsafe { libc::sched_setaffinity(0, size, &old) } != 0 {
        bail!(
            "restoring the affinity: {}",
            std::io::Error::last_os_error()
        );
    }
    result
}

/// Figure 1. Where the scheduler puts the two ends of a pair decides the
/// round trip on this VM (a wake-up across CPUs costs about 20 µs each way,
/// on one CPU a few µs), so the verdict compares ours and the reference with
/// both pairs on one CPU; the free-running figures are printed beside it.
fn round_trip(bins: &Binaries, report: &mut Report) -> anyhow::Result<()> {
    let (o, r) = on_one_cpu(|| rtt_samples(bins))?;
    let (free_o, free_r) = rtt_samples(bins)?;
    let ratio = o.p50 / r.p50;
    report.row(
        "1",
        "control round trip Ping→Pong, p50",
        format!("{} ({ratio:.2}× raw)", dur(o.p50)),
        format!("raw 64 B socketpair ping-pong {}", dur(r.p50)),
        "≤ 2× raw",
        Verdict::of(ratio <= 2.0),
    );
    report.note(
        "1",
        format!(
            "Both pairs pinned to CPU 0: ours {}; raw {}. Not pinned (the scheduler may split a pair \
             across the two CPUs, which costs either about 20 µs a wake-up): ours {} ({:.2}× raw); raw {}. \
             {} blocks of {RTT_PER_BLOCK} alternating raw/ours after {RTT_WARMUP} warm-up each. \
             Ours = this process as supervisor (tokio current-thread runtime, FrameWriter/FrameReader) ↔ \
             wfhost-child exec (real binary, its runtime answers Ping on its own task).",
            o.describe(),
            r.describe(),
            free_o.describe(),
            free_o.p50 / free_r.p50,
            free_r.describe(),
            RTT_BLOCKS
        ),
    );
    Ok(())
}

// -------------------------------------------------------------- figure 2

/// Frames per second of encode + decode alone (one process, no I/O).
fn encode_decode_rate(n: u64) -> anyhow::Result<f64> {
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let mut buf = Vec::with_capacity(64);
    let t = Instant::now();
    for seq in 1..=n {
        buf.clear();
        let frame = Frame {
            seq,
            body: Event::Pong { nonce: seq - 1 },
        };
        encode_frame(
            std::hint::black_box(&frame),
            DEFAULT_MAX_FRAME_BYTES,
            &mut buf,
        )?;
        let back: Frame<Event> = decoder.decode_one(std::hint::black_box(&buf))?;
        std::hint::black_box(back);
    }
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// What one sender run measured.
struct Run {
    rate: f64,
    wall: f64,
    receiver_cpu: f64,
    sender_cpu: f64,
}

fn parse_sender_cpu(out: &[u8]) -> f64 {
    String::from_utf8_lossy(out)
        .split_whitespace()
        .find_map(|p| p.strip_prefix("cpu="))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Frames sent through the stack under `strace -c` to count the sender's
/// syscalls; the run is slowed down by strace, only the counts are used.
const TRACED_FRAMES: u64 = 100_000;

/// The sender's socket-write syscalls per frame (`write`, `writev`,
/// `sendto`, `sendmsg`), counted by `strace -c` on a run of
/// [`TRACED_FRAMES`] through our stack; `None` without strace.
fn sender_syscalls_per_frame(rt: &tokio::runtime::Runtime) -> Option<(f64, String)> {
    let strace = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())?;
    let dir = wfhost_bench::supervisor::TempDir::new().ok()?;
    let out = dir.path().join("strace.txt");
    let exe = std::env::current_exe().ok()?;
    let (ours, theirs) = StdUnixStream::pair().ok()?;
    let mut cmd = Command::new(strace);
    cmd.args(["-qq", "-c", "-e", "trace=write,writev,sendto,sendmsg", "-o"])
        .arg(&out)
        .arg(exe)
        .args([HELPER, "send", &TRACED_FRAMES.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let sender = Killed(procs::spawn_with_fd3(&mut cmd, theirs.into()).ok()?);
    let received = rt.block_on(async {
        ours.set_nonblocking(true).ok()?;
        let stream = tokio::net::UnixStream::from_std(ours).ok()?;
        let (mut reader, _w) = wfhost_ipc::split::<Event, Control>(stream, DEFAULT_MAX_FRAME_BYTES);
        let mut n = 0u64;
        while let Ok(Some(_)) = reader.next().await {
            n += 1;
        }
        Some(n)
    })?;
    let mut sender = sender;
    let _ = sender.0.wait();
    drop(sender);
    let text = std::fs::read_to_string(&out).ok()?;
    let mut calls = 0u64;
    let mut parts = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let (Some(name), Some(n)) = (f.last(), f.get(3).and_then(|c| c.parse::<u64>().ok()))
            && ["write", "writev", "sendto", "sendmsg"].contains(name)
        {
            calls += n;
            parts.push(format!("{name} {n}"));
        }
    }
    (received == TRACED_FRAMES).then(|| (calls as f64 / TRACED_FRAMES as f64, parts.join(", ")))
}

/// One run through our stack: helper `send N`, FrameReader here.
fn framed_run(rt: &tokio::runtime::Runtime, n: u64) -> anyhow::Result<Run> {
    let (ours, theirs) = StdUnixStream::pair()?;
    let mut cmd = helper_command()?;
    cmd.args(["send", &n.to_string()]).stdout(Stdio::piped());
    let sender = procs::spawn_with_fd3(&mut cmd, theirs.into())?;
    let cpu0 = procs::self_cpu_secs();
    let (first, last) = rt.block_on(async {
        ours.set_nonblocking(true)?;
        let stream = tokio::net::UnixStream::from_std(ours)?;
        let (mut reader, _writer) =
            wfhost_ipc::split::<Event, Control>(stream, DEFAULT_MAX_FRAME_BYTES);
        let mut first = None;
        let mut count = 0u64;
        while let Some(event) = reader.next().await? {
            if first.is_none() {
                first = Some(Instant::now());
            }
            if !matches!(event, Event::Pong { .. }) {
                bail!("unexpected {event:?}");
            }
            count += 1;
            if count == n {
                break;
            }
        }
        let last = Instant::now();
        match first {
            Some(first) if count == n => anyhow::Ok((first, last)),
            _ => bail!("received {count} of {n} frames"),
        }
    })?;
    let receiver_cpu = procs::self_cpu_secs() - cpu0;
    let out = sender.wait_with_output()?;
    let wall = (last - first).as_secs_f64();
    Ok(Run {
        rate: (n - 1) as f64 / wall,
        wall,
        receiver_cpu,
        sender_cpu: parse_sender_cpu(&out.stdout),
    })
}

/// One run of raw writes: helper `rawsend N LEN`, blocking reads here.
fn raw_run(n: u64, len: usize) -> anyhow::Result<f64> {
    let (mut ours, theirs) = StdUnixStream::pair()?;
    let mut cmd = helper_command()?;
    cmd.args(["rawsend", &n.to_string(), &len.to_string()])
        .stdout(Stdio::piped());
    let sender = procs::spawn_with_fd3(&mut cmd, theirs.into())?;
    let want = n * len as u64;
    let mut got = 0u64;
    let mut buf = vec![0u8; 256 * 1024];
    let mut first = None;
    while got < want {
        let k = ours.read(&mut buf)?;
        if k == 0 {
            bail!("raw sender stopped after {got} of {want} bytes");
        }
        first.get_or_insert_with(Instant::now);
        got += k as u64;
    }
    let wall = first.map_or(0.0, |f| f.elapsed().as_secs_f64());
    sender.wait_with_output()?;
    Ok(n as f64 / wall)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn throughput(report: &mut Report) -> anyhow::Result<()> {
    let mut sample = Vec::new();
    encode_frame(
        &Frame {
            seq: FRAMES / 2,
            body: Event::Pong { nonce: FRAMES / 2 },
        },
        DEFAULT_MAX_FRAME_BYTES,
        &mut sample,
    )?;
    let frame_len = sample.len();

    let reference = median(
        (0..RUNS)
            .map(|_| encode_decode_rate(FRAMES))
            .collect::<anyhow::Result<_>>()?,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut runs = Vec::new();
    for _ in 0..RUNS {
        runs.push(framed_run(&rt, FRAMES)?);
    }
    runs.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    let mid = &runs[runs.len() / 2];
    let traced = sender_syscalls_per_frame(&rt);
    let raw = median(
        (0..RUNS)
            .map(|_| raw_run(FRAMES, frame_len))
            .collect::<anyhow::Result<_>>()?,
    );

    let ok = mid.rate >= 1_000_000.0;
    report.row(
        "2",
        "small-frame throughput child → supervisor",
        rate(mid.rate),
        format!("encode+decode alone {}", rate(reference)),
        "≥ 1,000,000 frames/s",
        Verdict::of(ok),
    );
    let n = FRAMES as f64;
    report.note(
        "2",
        format!(
            "{FRAMES} Event::Pong frames of ~{frame_len} B, median of {RUNS} runs (all: {}). \
             Sender (FrameWriter::queue, one flush per 64 KiB, tokio current-thread, as the child runtime's outbox): \
             CPU {:.2} s over {:.2} s wall ({:.0}% of a core, {} per frame). \
             Receiver (FrameReader::next in this process): CPU {:.2} s ({:.0}% of a core).",
            runs.iter()
                .map(|r| rate(r.rate))
                .collect::<Vec<_>>()
                .join(", "),
            mid.sender_cpu,
            mid.wall,
            100.0 * mid.sender_cpu / mid.wall,
            dur(mid.sender_cpu / n),
            mid.receiver_cpu,
            100.0 * mid.receiver_cpu / mid.wall,
        ),
    );
    let per_frame = match &traced {
        Some((per, parts)) => {
            report.note(
                "2",
                format!(
                    "strace -c of the sender over {TRACED_FRAMES} frames (separate, slowed run): {per:.2} socket-write \
                     syscalls per frame ({parts})."
                ),
            );
            format!("{per:.2} write syscalls/frame (strace)")
        }
        None => "one write_all per frame (by inspection; strace not found)".to_owned(),
    };
    report.note(
        "2",
        format!(
            "Second reference, same run: raw blocking write(2) of the same {frame_len} B per frame, no codec: {} \
             — the ceiling of any sender that makes one write syscall per frame.",
            rate(raw)
        ),
    );
    if !ok {
        let short = 1_000_000.0 / mid.rate;
        report.note(
            "2",
            format!(
                "MISS by {short:.2}× ({} short of 1 M/s). Sender write syscalls: {per_frame}; \
                 encode+decode alone {}; raw one-write-per-frame without a codec {}. Compare the \
                 sender's and receiver's CPU above to see which side is the limit.",
                rate(1_000_000.0 - mid.rate),
                rate(reference),
                rate(raw)
            ),
        );
    }
    Ok(())
}
