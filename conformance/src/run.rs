//! Playing the chosen scenarios one after another, each against a fresh
//! child that is killed (its whole tree) afterwards, and printing
//! `PASS name (N ms)` / `FAIL name: expected …, got …` lines, the child's
//! output under each failure, and the tally.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use tokio::time::Instant;
use wfhost_ipc::key;
use wfhost_process::Spawner;

use crate::failure::Failure;
use crate::scenarios::Scenario;
use crate::subject::{Launcher, Subject};

/// The longest any one scenario may take, whatever it waits for.
const SCENARIO_CAP: Duration = Duration::from_secs(45);
/// Lines of each output stream printed under a failure.
const OUTPUT_LINES: usize = 30;

/// Plays `scenarios` against children of `command`; exit 0 only if all
/// passed, 1 if any failed, 2 if the kit itself could not run.
pub async fn run(
    scenarios: &[Scenario],
    command: &[OsString],
    env: Vec<(OsString, OsString)>,
    expect: Option<u32>,
) -> ExitCode {
    let prepared = key::generate().map_err(|e| e.to_string()).and_then(|key| {
        let spawner = Spawner::start(tokio::runtime::Handle::current())
            .map_err(|e| format!("cannot start the spawner thread: {e}"))?;
        Launcher::new(spawner, command, env, key, expect)
    });
    let launcher = match prepared {
        Ok(launcher) => launcher,
        Err(e) => {
            eprintln!("wfhost-conformance: {e}");
            return ExitCode::from(2);
        }
    };
    let mut passed = 0;
    let mut failed = 0;
    for scenario in scenarios {
        let started = Instant::now();
        let (result, output) = play_one(scenario, &launcher).await;
        let ms = started.elapsed().as_millis();
        let mut out = std::io::stdout().lock();
        match result {
            Ok(()) => {
                passed += 1;
                let _ = writeln!(out, "PASS {} ({ms} ms)", scenario.name());
            }
            Err(failure) => {
                failed += 1;
                let _ = writeln!(out, "FAIL {}: {failure}", scenario.name());
                if let Some((stdout, stderr)) = output {
                    print_output(&mut out, "stdout", &stdout);
                    print_output(&mut out, "stderr", &stderr);
                }
            }
        }
        let _ = out.flush();
    }
    // A closed stdout (a pager quit early) is no reason to panic.
    let _ = writeln!(std::io::stdout().lock(), "{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Starts a child, plays `scenario` against it (bounded by
/// [`SCENARIO_CAP`]), then kills and reaps it; returns the verdict and
/// what the child wrote.
async fn play_one(
    scenario: &Scenario,
    launcher: &Launcher,
) -> (Result<(), Failure>, Option<(String, String)>) {
    let mut subject: Subject = match launcher.launch(scenario.supervisor()).await {
        Ok(subject) => subject,
        Err(failure) => return (Err(failure), None),
    };
    let result =
        match tokio::time::timeout(SCENARIO_CAP, scenario.play(&mut subject, launcher)).await {
            Ok(result) => result,
            Err(_) => Err(Failure::new(
                format!("the scenario to end within {} s", SCENARIO_CAP.as_secs()),
                format!("it was still waiting; {}", subject.events.summary()),
            )),
        };
    subject.finish().await;
    (result, Some(subject.output()))
}

/// Prints the last lines of one output stream, indented.
fn print_output(out: &mut impl Write, name: &str, text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        let _ = writeln!(out, "    {name}: (nothing)");
        return;
    }
    let skip = lines.len().saturating_sub(OUTPUT_LINES);
    let _ = writeln!(
        out,
        "    {name}:{}",
        if skip > 0 {
            format!(" ({skip} earlier lines not shown)")
        } else {
            String::new()
        }
    );
    for line in &lines[skip..] {
        let _ = writeln!(out, "    | {line}");
    }
}
