//! `wfhost demo`: a self-contained tour on a temporary state dir. It starts
//! a real supervisor with two deployments and walks through spawn, mail, a
//! self recycle, a policy recycle, a drain whose budget runs out (signed,
//! journaled cancel), a graceful stop and a journal check, printing what
//! happened at each step.

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

/// The tour's config: `orders` runs the demo workflow (asks for a recycle
/// every 5 items, recycled by policy after 6 s of uptime); `reports` hosts
/// a command that ignores SIGTERM, so its drain budget runs out.
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
id = "reports"
command = ["wfhost-child", "exec", "--drain", "cancel", "--", "sh", "-c", "trap '' TERM; while :; do sleep 1; done"]
drain_timeout = "1500ms"
drain_deadline = "10s"
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
        let reports = self.wait("reports", "ready", ready)?;
        self.say(&format!(
            "spawned: orders (pid {}, demo workflow) and reports (pid {}, a command that ignores SIGTERM), \
             each on its own socketpair at fd 3",
            orders["pid"], reports["pid"]
        ));

        for i in 1..=7 {
            self.target()
                .send("orders", format!("order {i}").as_bytes(), None)
                .map_err(|e| anyhow::anyhow!(e.message))?;
        }
        self.say("sent 7 mail items to orders; each is durable in the inbox before `send` returns");
        let d = self.wait("orders", "7 items done", |d| d["mail"]["done"] == 7)?;
        self.say(&format!(
            "orders processed all 7 (fetch, approve, apply each); it asked to be recycled after 5: \
             self recycles = {}, nothing lost (inbox {}, processing {})",
            d["recycles"]["self"], d["mail"]["inbox"], d["mail"]["processing"]
        ));

        let d = self.wait("orders", "a policy recycle", |d| {
            d["recycles"]["policy"].as_u64() >= Some(1)
        })?;
        self.say(&format!(
            "policy recycle: {} (new pid {})",
            d["last_recycle"]["reason"].as_str().unwrap_or("?"),
            d["pid"]
        ));

        let message = self.call(Request::Drain {
            deployment: "reports".into(),
        })?;
        self.say(&format!(
            "drain reports: {}",
            message["message"].as_str().unwrap_or("draining")
        ));
        let d = self.wait("reports", "escalation", |d| d["drain"]["escalated"] == true)?;
        self.say(&format!(
            "the 1.5 s budget ran out (used {} ms while a cancel-behaviour step ran): a signed cancel was \
             committed to the journal, then sent",
            d["drain"]["used_ms"]
        ));
        self.wait("reports", "drained", |d| d["state"] == "drained")?;
        self.say("the child verified the cancel and killed its command; reports is drained (not restarted)");

        self.stop()?;
        self.say("SIGTERM: every child drained and stopped; the supervisor exited 0");
        let out = Command::new(&exe)
            .args(["journal", "verify", "--state-dir"])
            .arg(self.dir.join("state"))
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
        self.say(&format!("journal verify: {first}"));
        self.show_cancel(&exe, &self.dir.join("state"))?;
        println!("\ndemo complete");
        Ok(())
    }

    fn show_cancel(&self, exe: &Path, state: &Path) -> anyhow::Result<()> {
        let out = Command::new(exe)
            .args(["journal", "show", "--state-dir"])
            .arg(state)
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

    fn stop(&mut self) -> anyhow::Result<()> {
        let Some(child) = self.supervisor.as_mut() else {
            return Ok(());
        };
        let pid =
            nix::unistd::Pid::from_raw(i32::try_from(child.id()).context("pid out of range")?);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)
            .context("cannot signal the supervisor")?;
        let status = child.wait().context("cannot wait for the supervisor")?;
        self.supervisor = None;
        if !status.success() {
            bail!("the supervisor exited with {status}");
        }
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
