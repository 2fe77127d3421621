//! The supervisor's control loop, from its first spawns to its exit:
//! signals, the host's asks from the control socket, a store created
//! beside the first spawns, readiness for systemd, the watchdog and the
//! trim after start-up; then, once it stops, the wait for every
//! deployment to end.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use super::reload;
use super::store_open::Opening;
use crate::control::host::{HostAsk, Reloaded, Stopping};
use crate::host::Supervisor;
use crate::observe::notify::Notifier;
use crate::shared::Shared;

/// How often the control loop wakes when nothing else happens: it then
/// feeds the systemd watchdog (if its interval is shorter it wakes at that).
const TICK: Duration = Duration::from_secs(1);

/// How long after every deployment is up the start-up's leftovers are
/// given back ([`trim_resident`]): time for the first pings and mail.
const TRIM_AFTER_START: Duration = Duration::from_secs(3);

/// Gives back what start-up left resident and idling does not use (free
/// heap, code run once): DESIGN §10, idle RSS.
fn trim_resident() {
    match wfhost_process::trim() {
        Ok(t) => tracing::debug!(
            before_kib = t.before_kib,
            after_kib = t.after_kib,
            "gave back start-up memory"
        ),
        Err(e) => {
            warn!(error = %e, "cannot give back start-up memory; the supervisor only stays larger")
        }
    }
}

/// Every signal the supervisor answers.
pub(super) struct Signals {
    term: Signal,
    int: Signal,
    quit: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
}

impl Signals {
    pub(super) fn watch() -> anyhow::Result<Self> {
        let watch = |kind: SignalKind, name: &str| {
            signal(kind).with_context(|| format!("cannot watch {name}"))
        };
        Ok(Self {
            term: watch(SignalKind::terminate(), "SIGTERM")?,
            int: watch(SignalKind::interrupt(), "SIGINT")?,
            quit: watch(SignalKind::quit(), "SIGQUIT")?,
            hup: watch(SignalKind::hangup(), "SIGHUP")?,
            usr1: watch(SignalKind::user_defined1(), "SIGUSR1")?,
            usr2: watch(SignalKind::user_defined2(), "SIGUSR2")?,
        })
    }
}

/// Sends one notification to systemd, logging (not failing) on error.
pub(super) fn notify(
    notifier: Option<&Notifier>,
    what: &str,
    f: impl FnOnce(&Notifier) -> std::io::Result<()>,
) {
    if let Some(n) = notifier
        && let Err(e) = f(n)
    {
        warn!(error = %e, what, "cannot notify systemd");
    }
}

/// The loop's ticker: every [`TICK`], or the watchdog's interval if
/// systemd asked for one that is shorter.
pub(super) fn ticker(notifier: Option<&Notifier>) -> tokio::time::Interval {
    let tick = notifier
        .and_then(Notifier::watchdog_interval)
        .map_or(TICK, |w| w.min(TICK));
    tokio::time::interval(tick)
}

/// What the control loop holds.
pub(super) struct Serving<'a> {
    pub sup: Supervisor,
    pub shared: Arc<Shared>,
    pub signals: Signals,
    pub asks: mpsc::Receiver<HostAsk>,
    pub ticker: tokio::time::Interval,
    pub notifier: Option<Notifier>,
    pub in_force: reload::InForce,
    pub config_path: &'a Path,
}

/// Readiness as systemd hears it, and the trim it starts.
#[derive(Default)]
struct Up {
    ready_sent: bool,
    trim_at: Option<Instant>,
    last_status: String,
}

impl Serving<'_> {
    /// The watchdog notifier: only when systemd asked for one, and asked
    /// us (WATCHDOG_PID).
    fn watchdog(&self) -> Option<&Notifier> {
        self.notifier
            .as_ref()
            .filter(|n| n.watchdog_interval().is_some())
    }

    /// Serves until a stop (`true`: graceful) or SIGQUIT or a store that
    /// could not be created (`false`, with why in the second place).
    pub(super) async fn serve(&mut self, opening: Option<Opening>) -> (bool, Option<String>) {
        let mut up = Up::default();
        // Resolves once a store created beside the first spawns is open (at
        // once fails the start: every child is killed).
        let opened = async move {
            match opening {
                Some(opening) => opening.wait().await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(opened);
        let mut opening_done = false;
        loop {
            tokio::select! {
                result = &mut opened, if !opening_done => match result {
                    Ok(()) => opening_done = true,
                    Err(e) => {
                        error!(error = %e, "the new store could not be opened; killing every child and exiting");
                        return (false, Some(e));
                    }
                },
                _ = self.signals.term.recv() => { info!("SIGTERM: draining and stopping every child"); return (true, None) }
                _ = self.signals.int.recv() => { info!("SIGINT: draining and stopping every child"); return (true, None) }
                _ = self.signals.quit.recv() => { info!("SIGQUIT: killing every child now"); return (false, None) }
                _ = self.signals.hup.recv() => {
                    info!("SIGHUP: reloading the config");
                    let _ = self.reload().await;
                }
                Some(ask) = self.asks.recv() => match ask {
                    HostAsk::Reload(tx) => {
                        info!("reload asked over the control socket");
                        let _ = tx.send(self.reload().await);
                    }
                    HostAsk::Stop(tx) => {
                        info!("stop asked over the control socket: draining and stopping every child");
                        let _ = tx.send(Ok(Stopping {
                            pid: std::process::id(),
                            deployments: self.sup.handles().len(),
                        }));
                        return (true, None);
                    }
                },
                _ = self.signals.usr1.recv() => {
                    info!("SIGUSR1: recycling every deployment");
                    self.sup.recycle_all("SIGUSR1").await;
                }
                _ = self.signals.usr2.recv() => dump_status(&self.sup),
                _ = self.shared.started.notified(), if !up.ready_sent => self.check_up(&mut up),
                _ = self.ticker.tick() => self.tick(&mut up),
            }
        }
    }

    /// A reload, told to systemd around it.
    async fn reload(&mut self) -> Result<Reloaded, String> {
        notify(self.notifier.as_ref(), "reloading", Notifier::reloading);
        let done = reload::reload(
            &mut self.sup,
            self.config_path,
            &self.shared,
            &mut self.in_force,
        )
        .await;
        notify(self.notifier.as_ref(), "ready", Notifier::ready);
        done
    }

    /// Once every deployment is up: say so (log, systemd) and plan the trim.
    fn check_up(&self, up: &mut Up) {
        if up.ready_sent || !self.sup.all_started() {
            return;
        }
        up.ready_sent = true;
        up.trim_at = Some(Instant::now() + TRIM_AFTER_START);
        let line = self.sup.summary();
        info!(status = %line, "every deployment is up");
        notify(self.notifier.as_ref(), "ready", |n| {
            n.ready_with_status(&line)
        });
        up.last_status = line;
    }

    /// The loop's tick: the store's backlog, the watchdog (fed from the
    /// loop itself, so a wedged loop starves it), the trim, readiness and
    /// systemd's status line.
    fn tick(&self, up: &mut Up) {
        self.shared.retry_backlog();
        notify(self.watchdog(), "watchdog", Notifier::watchdog);
        if up.trim_at.is_some_and(|at| Instant::now() >= at) {
            up.trim_at = None;
            trim_resident();
        }
        if !up.ready_sent {
            self.check_up(up);
        } else if self.notifier.is_some() {
            // Only systemd reads the summary between changes.
            let line = self.sup.summary();
            if line != up.last_status {
                notify(self.notifier.as_ref(), "status", |n| n.status(&line));
                up.last_status = line;
            }
        }
    }

    /// Stops every deployment (drained when `graceful`, else killed) and
    /// waits for all of them, answering signals and asks meanwhile and
    /// extending systemd's stop timeout while drains are within budget.
    pub(super) async fn wind_down(&mut self, graceful: bool) {
        let Serving {
            sup,
            shared,
            signals,
            asks,
            ticker,
            notifier,
            ..
        } = self;
        let notifier = notifier.as_ref();
        let watchdog = notifier.filter(|n| n.watchdog_interval().is_some());
        notify(notifier, "stopping", Notifier::stopping);
        let registry = sup.registry();
        if graceful {
            sup.request_stop().await;
        } else {
            Supervisor::request_kill(&registry).await;
        }
        let join = sup.join_all();
        tokio::pin!(join);
        loop {
            tokio::select! {
                _ = &mut join => break,
                _ = signals.quit.recv() => {
                    info!("SIGQUIT during the stop: killing every child now");
                    Supervisor::request_kill(&registry).await;
                }
                // A second SIGTERM does not skip the budget: SIGQUIT does.
                _ = signals.term.recv() => info!("SIGTERM again: still draining; send SIGQUIT to kill now"),
                _ = signals.int.recv() => info!("SIGINT again: still draining; send SIGQUIT to kill now"),
                Some(ask) = asks.recv() => ask.refuse("the supervisor is already stopping; it takes no reload or second stop"),
                _ = ticker.tick() => {
                    shared.retry_backlog();
                    notify(watchdog, "watchdog", Notifier::watchdog);
                    if let Some(needed) = Supervisor::drain_time_needed(&registry) {
                        // Re-sent every tick: each one extends from now.
                        let extra = needed + Duration::from_secs(5);
                        notify(notifier, "extend timeout", |n| n.extend_timeout(extra));
                    }
                }
            }
        }
    }
}

/// SIGUSR2: one log line per deployment.
fn dump_status(sup: &Supervisor) {
    let now = Instant::now();
    info!(summary = %sup.summary(), "SIGUSR2: status dump");
    for h in sup.handles() {
        let s = h.snapshot();
        let pid = s.pid.map_or_else(|| "-".to_owned(), |p| p.to_string());
        let uptime_ms = s
            .started_at
            .map_or(0, |t| now.saturating_duration_since(t).as_millis() as u64);
        let rss_bytes = s
            .rss_bytes()
            .map_or_else(|| "-".to_owned(), |b| b.to_string());
        info!(deployment = %s.id, state = s.state.as_str(), pid = %pid, restarts = s.restarts,
            uptime_ms, rss_bytes = %rss_bytes, drain_active = s.drain.active, drain_used_ms = s.drain.used_ms(now),
            steps = s.steps_in_flight, last_exit = %s.last_exit.as_deref().unwrap_or("-"), "status");
    }
}
