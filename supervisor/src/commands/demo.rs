//! `wfhost demo`: a self-contained tour on a temporary state dir. It starts
//! a real supervisor with four deployments and tells, one plain sentence
//! a stage, what wfhost does that other supervisors do not: mail that is
//! never lost while a child asks to be replaced and the policy replaces
//! it; a drain whose budget stays paused while a wait step (a person
//! approving) outlasts it; a question to a person that a recycle does not
//! wait for, answered after it and delivered to the new child; a budget
//! that runs out, so a signed cancel is
//! journaled, sent, and verified by the child; a recycle without a gap
//! (`recycle.overlap`), the new child serving while the old one winds
//! down; a graceful stop; a journal whose every signature and link checks
//! out.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::control::client::Target;
use crate::control::protocol::{Request, SOCKET_NAME};
use crate::exit;

/// Arguments of `wfhost demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Keep the temporary state dir (config, store, supervisor log).
    #[arg(long)]
    keep: bool,
}

/// The tour's config: `orders` runs the demo workflow (asks to be
/// recycled every 5 items, recycled by policy after 6 s of uptime);
/// `approvals` has a 3 s approval (a wait step) against a 1 s budget;
/// `reports` hosts a command that ignores SIGTERM, so its drain budget runs
/// out; `checkout` recycles make-before-break, its drained steps winding
/// down for 2 s; `signoff` runs the conformance child, whose handlers ask
/// a person when the payload says so.
const CONFIG: &str = r#"[supervisor]
state_dir = "state"
policy_interval = "200ms"

[defaults]
kill_timeout = "2s"

[[deployment]]
id = "orders"
command = ["wfhost-child", "demo", "--recycle-every", "5", "--step-ms", "20", "--approve-ms", "40"]
recycle = { max_uptime = "6s" }

[[deployment]]
id = "approvals"
command = ["wfhost-child", "demo", "--step-ms", "50", "--approve-ms", "3000"]
drain_timeout = "1s"

[[deployment]]
id = "signoff"
command = ["wfhost-child", "conformance"]
drain_timeout = "30s"

[[deployment]]
id = "reports"
command = ["wfhost-child", "exec", "--drain", "cancel", "--", "sh", "-c", "trap '' TERM; while :; do sleep 1; done"]
drain_timeout = "1500ms"
drain_deadline = "10s"

[[deployment]]
id = "checkout"
command = ["wfhost-child", "demo", "--step-ms", "100", "--approve-ms", "20", "--cleanup-ms", "2000"]
recycle = { overlap = true }
drain_timeout = "5s"
"#;

/// Runs the tour.
pub fn run(args: Args) -> u8 {
    let dir = match make_dir() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("wfhost demo: {e:#}");
            return exit::FAILED;
        }
    };
    let mut tour = Tour {
        dir: dir.clone(),
        supervisor: None,
        started: Instant::now(),
    };
    let result = tour.run();
    tour.shutdown();
    if args.keep || result.is_err() {
        println!(
            "\nstate, config and supervisor log kept in {}",
            dir.display()
        );
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    match result {
        Ok(()) => exit::OK,
        Err(e) => {
            eprintln!("wfhost demo: {e:#}");
            exit::FAILED
        }
    }
}

fn make_dir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir().join(format!("wfhost-demo-{}", std::process::id()));
    std::fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    std::fs::write(base.join("wfhost.toml"), CONFIG).context("cannot write the demo config")?;
    Ok(base)
}

struct Tour {
    dir: PathBuf,
    supervisor: Option<Child>,
    started: Instant,
}

/// A number in a status object, for the story.
fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

impl Tour {
    fn say(&self, text: &str) {
        println!("[{:>5.1}s] {text}", self.started.elapsed().as_secs_f64());
    }

    fn target(&self) -> Target {
        Target {
            config: None,
            socket: Some(self.dir.join("state").join(SOCKET_NAME)),
        }
    }

    fn call(&self, request: Request) -> anyhow::Result<Value> {
        self.target()
            .call(request)
            .map_err(|e| anyhow::anyhow!(e.message))
    }

    fn deployment(&self, id: &str) -> anyhow::Result<Value> {
        let status = self.call(Request::Status)?;
        status["deployments"]
            .as_array()
            .and_then(|a| a.iter().find(|d| d["id"] == id).cloned())
            .with_context(|| format!("no deployment {id} in status"))
    }

    fn wait(&self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(d) = self.deployment(id)
                && pred(&d)
            {
                return Ok(d);
            }
            if Instant::now() > deadline {
                bail!(
                    "timed out waiting for {id}: {what}; see {}",
                    self.dir.join("supervisor.log").display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn run(&mut self) -> anyhow::Result<()> {
        let exe = std::env::current_exe().context("cannot find the wfhost binary")?;
        let log = std::fs::File::create(self.dir.join("supervisor.log"))
            .context("cannot create the log")?;
        println!("wfhost demo: a supervisor on {}\n", self.dir.display());
        let child = Command::new(&exe)
            .args(["supervise", "--config"])
            .arg(self.dir.join("wfhost.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("cannot share the log")?)
            .stderr(log)
            .spawn()
            .context("cannot start `wfhost supervise`")?;
        self.supervisor = Some(child);

        let ready = |d: &Value| d["state"] == "ready";
        let orders = self.wait("orders", "ready", ready)?;
        self.wait("approvals", "ready", ready)?;
        self.wait("signoff", "ready", ready)?;
        let reports = self.wait("reports", "ready", ready)?;
        self.say(&format!(
            "The supervisor started five workflow children, each on a private socketpair at fd 3: \
             orders (pid {}), approvals, signoff, reports (pid {}, a command that ignores SIGTERM) and checkout.",
            orders["pid"], reports["pid"]
        ));
        self.mail_and_recycles(&orders)?;
        self.wait_step_outlasts_the_drain()?;
        self.answer_after_a_recycle()?;
        self.budget_runs_out()?;
        self.gapless()?;
        self.stop()?;
        self.verify_journal(&exe)?;
        println!("\ndemo complete");
        Ok(())
    }

    /// Mail, a self recycle and a policy recycle, nothing lost.
    fn mail_and_recycles(&self, orders: &Value) -> anyhow::Result<()> {
        for i in 1..=7 {
            self.target()
                .send("orders", format!("order {i}").as_bytes(), None, None)
                .map_err(|e| anyhow::anyhow!(e.message))?;
        }
        self.say(
            "We sent orders 7 mail items; each was durable in the inbox before `send` returned.",
        );
        let d = self.wait("orders", "7 items done", |d| d["mail"]["done"] == 7)?;
        self.say(&format!(
            "After its 5th item the child asked to be replaced (self-recycle): the supervisor drained it, \
             started pid {} in place of pid {}, and all 7 items are done, none lost ({} self recycle).",
            d["pid"],
            orders["pid"],
            n(&d["recycles"]["self"])
        ));
        let d = self.wait("orders", "a policy recycle", |d| {
            n(&d["recycles"]["policy"]) >= 1
        })?;
        self.say(&format!(
            "orders ran past its max_uptime of 6s, so the policy recycled it the same way ({}); pid {} now serves.",
            d["last_recycle"]["reason"].as_str().unwrap_or("?"),
            d["pid"]
        ));
        Ok(())
    }

    /// The budget ticks only for cancel-behaviour work: a long approval
    /// outlasts it without spending any.
    fn wait_step_outlasts_the_drain(&self) -> anyhow::Result<()> {
        self.target()
            .send("approvals", b"expense report", None, None)
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let in_approval = |d: &Value| {
            d["steps"]
                .as_array()
                .is_some_and(|s| s.iter().any(|s| s["step"] == "approve"))
        };
        self.wait("approvals", "the approve step", in_approval)?;
        self.call(Request::Drain {
            deployment: "approvals".into(),
        })?;
        let began = Instant::now();
        self.say(
            "We drained approvals while its approve step ran: a wait-behaviour step, like a person approving, \
             which a drain lets finish.",
        );
        std::thread::sleep(Duration::from_millis(1500));
        let d = self.deployment("approvals")?;
        self.say(&format!(
            "1.5s later, past the whole 1s budget, the budget is {} at {} ms: it only ticks while \
             cancel-behaviour work runs.",
            d["drain"]["budget"].as_str().unwrap_or("?"),
            n(&d["drain"]["used_ms"])
        ));
        let d = self.wait("approvals", "drained", |d| d["state"] == "drained")?;
        self.say(&format!(
            "The approval finished after {:.1}s and the child drained with {} ms of its budget used and no cancel \
             (escalated: {}); its mail waits in the inbox for `wfhost resume`.",
            began.elapsed().as_secs_f64(),
            n(&d["drain"]["used_ms"]),
            d["drain"]["escalated"]
        ));
        Ok(())
    }

    /// A handler asks a person; a recycle gives the item back instead of
    /// waiting, and the answer, given afterwards, reaches the new child.
    fn answer_after_a_recycle(&self) -> anyhow::Result<()> {
        let payload = br#"{"ask":{"key":"approve","prompt":{"order":"D-7","amount":420}}}"#;
        let sent = self
            .target()
            .send("signoff", payload, None, None)
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let id = n(&sent["id"]);
        let old = self.wait("signoff", "the question", |d| {
            n(&d["mail"]["questions_open"]) == 1
        })?;
        self.say(&format!(
            "signoff's handler asked a person to approve order D-7 (mail {id}); `wfhost questions` lists it."
        ));
        let began = Instant::now();
        self.call(Request::Recycle {
            deployment: "signoff".into(),
            reason: Some("demo upgrade".into()),
        })?;
        let new = self.deployment("signoff")?;
        self.say(&format!(
            "We recycled signoff: it took {} ms of its 30 s drain budget, because the child gave the waiting item back instead of holding the drain (pid {} replaced pid {}; the item waits, uncounted).",
            began.elapsed().as_millis(),
            new["pid"],
            old["pid"]
        ));
        let answered = self.call(Request::Answer {
            id,
            key: "approve".into(),
            value: serde_json::json!({"approved": true}),
            by: Some("demo".into()),
            peer: None,
        })?;
        let end = self.call(Request::MailResult {
            id,
            wait_ms: Some(10_000),
        })?;
        let result = end["result"]
            .as_str()
            .and_then(|b| {
                base64::engine::Engine::decode(&base64::engine::general_purpose::STANDARD, b).ok()
            })
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        self.say(&format!(
            "Then a person answered (journal record {}): the new child's handler asked again, got the stored answer at once, and mail {id} ended {} with the result {result}.",
            answered["journal_seq"],
            end["outcome"].as_str().unwrap_or("?"),
        ));
        Ok(())
    }

    /// A budget that runs out: signed, journaled, then sent, and verified
    /// by the child.
    fn budget_runs_out(&self) -> anyhow::Result<()> {
        self.call(Request::Drain {
            deployment: "reports".into(),
        })?;
        self.say("We drained reports, whose command ignores the SIGTERM a drain sends it.");
        let d = self.wait("reports", "escalation", |d| d["drain"]["escalated"] == true)?;
        self.say(&format!(
            "Its cancel-behaviour step used the whole {} ms budget, so the supervisor signed a cancel with its \
             ed25519 key, committed it to the journal, and only then sent it to the child.",
            n(&d["drain"]["used_ms"])
        ));
        self.wait("reports", "drained", |d| d["state"] == "drained")?;
        let lines = self
            .target()
            .collect(Request::Logs {
                deployment: "reports".into(),
                lines: 100,
                follow: false,
            })
            .map_err(|e| anyhow::anyhow!(e.message))?;
        let verified = lines
            .iter()
            .filter_map(|l| l["text"].as_str())
            .find(|t| t.contains("accepted (origin supervisor-drain"))
            .unwrap_or("(its line is in the supervisor log)");
        self.say(&format!(
            "The child checked the signature against the supervisor's public key before obeying it: \"{verified}\"; \
             it killed its command and reports is drained."
        ));
        Ok(())
    }

    /// An overlapping recycle: the successor is ready and serving before
    /// the old child drains, so mail never waits for the drain.
    fn gapless(&self) -> anyhow::Result<()> {
        let send = |text: &str| {
            self.target()
                .send("checkout", text.as_bytes(), None, None)
                .map_err(|e| anyhow::anyhow!(e.message))
        };
        let old = self.wait("checkout", "ready", |d| d["state"] == "ready")?;
        send("cart 1")?;
        self.wait("checkout", "a step in flight", |d| {
            n(&d["steps_in_flight"]) > 0
        })?;
        let target = self.target();
        let began = Instant::now();
        let recycle = std::thread::spawn(move || {
            target.call(Request::Recycle {
                deployment: "checkout".into(),
                reason: Some("new release".into()),
            })
        });
        let d = self.wait("checkout", "the successor serving", |d| {
            d["pid"] != old["pid"] && d["state"] == "ready"
        })?;
        let took = began.elapsed();
        for i in 2..=4 {
            send(&format!("cart {i}"))?;
        }
        let new_pid = d["pid"].clone();
        let serving = |d: &Value| {
            let replicas = d["replicas"].as_array().cloned().unwrap_or_default();
            let by_new = replicas
                .iter()
                .find(|r| r["pid"] == new_pid)
                .map_or(0, |r| n(&r["mail_done"]));
            let old_alive = replicas.iter().any(|r| r["pid"] == old["pid"]);
            (by_new >= 3, old_alive)
        };
        let d = self.wait("checkout", "the new child serving", |d| serving(d).0)?;
        let old_still_there = serving(&d).1;
        self.say(&format!(
            "We recycled checkout (recycle.overlap = true) while pid {} worked on a cart: its successor, pid {}, was ready {} ms later and did the next 3 carts {}; checkout never stopped taking mail.",
            old["pid"],
            new_pid,
            took.as_millis(),
            if old_still_there {
                "while the old child was still winding down its drained step"
            } else {
                "as the old child finished"
            }
        ));
        match recycle.join() {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("the recycle failed: {}", e.message),
            Err(_) => bail!("the recycle thread panicked"),
        }
        let d = self.wait("checkout", "all 4 carts done", |d| d["mail"]["done"] == 4)?;
        self.say(&format!(
            "Once the old child had drained, the one cart it had not finished went to pid {}: {} of 4 carts done, none lost, none twice.",
            d["pid"],
            n(&d["mail"]["done"])
        ));
        Ok(())
    }

    fn verify_journal(&self, exe: &Path) -> anyhow::Result<()> {
        let state = self.dir.join("state");
        let out = Command::new(exe)
            .args(["journal", "verify", "--state-dir"])
            .arg(&state)
            .output()
            .context("cannot run `wfhost journal verify`")?;
        if !out.status.success() {
            bail!(
                "journal verify failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let first = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_owned();
        self.say(&format!(
            "`wfhost journal verify` checked every record's signature and its link to the one before: {first}."
        ));
        let out = Command::new(exe)
            .args(["journal", "show", "--state-dir"])
            .arg(&state)
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text
            .lines()
            .filter(|l| l.contains("cancel") || l.contains("recycle"))
        {
            println!("    {line}");
        }
        Ok(())
    }

    /// `wfhost stop`, waited for: every child drained and stopped.
    fn stop(&mut self) -> anyhow::Result<()> {
        self.call(Request::Stop)?;
        let Some(child) = self.supervisor.as_mut() else {
            return Ok(());
        };
        let status = child.wait().context("cannot wait for the supervisor")?;
        self.supervisor = None;
        if !status.success() {
            bail!("the supervisor exited with {status}");
        }
        self.say(
            "`wfhost stop`: the supervisor drained and stopped every child still running, and exited 0.",
        );
        Ok(())
    }

    /// Leaves nothing running, whatever happened.
    fn shutdown(&mut self) {
        if let Some(mut child) = self.supervisor.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
