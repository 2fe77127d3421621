//! The result table: `what | figure | reference | target | verdict`, one
//! row per figure of DESIGN §10, then notes with the detail behind each.

use std::fmt::Write as _;

/// Whether a figure met its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The figure is within the target.
    Pass,
    /// The figure is outside the target.
    Miss,
    /// The benchmark could not produce the figure (the reason is in the notes).
    Error,
    /// No target: a figure printed for information (shown as `-`).
    Info,
}

impl Verdict {
    /// PASS when `ok`, else MISS.
    pub fn of(ok: bool) -> Self {
        if ok { Self::Pass } else { Self::Miss }
    }

    fn as_str(&self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Miss => "MISS",
            Self::Error => "ERROR",
            Self::Info => "-",
        }
    }
}

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Row {
    /// Sort key and label: the figure's number in the brief ("1", "11a").
    pub id: String,
    /// What is measured.
    pub what: String,
    /// The figure measured.
    pub figure: String,
    /// The reference measured in the same run.
    pub reference: String,
    /// The target of DESIGN §10.
    pub target: String,
    /// PASS, MISS or ERROR.
    pub verdict: Verdict,
}

/// A table being filled in by one benchmark binary.
#[derive(Debug, Default)]
pub struct Report {
    rows: Vec<Row>,
    notes: Vec<(String, String)>,
}

fn sort_key(id: &str) -> (u32, String) {
    let digits: String = id.chars().take_while(char::is_ascii_digit).collect();
    (
        digits.parse().unwrap_or(u32::MAX),
        id[digits.len()..].to_owned(),
    )
}

impl Report {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a row.
    pub fn row(
        &mut self,
        id: &str,
        what: &str,
        figure: String,
        reference: String,
        target: &str,
        verdict: Verdict,
    ) {
        self.rows.push(Row {
            id: id.to_owned(),
            what: what.to_owned(),
            figure,
            reference,
            target: target.to_owned(),
            verdict,
        });
    }

    /// Adds a note under figure `id`, and echoes it on stderr as progress.
    pub fn note(&mut self, id: &str, text: impl Into<String>) {
        let text = text.into();
        eprintln!("  [{id}] {text}");
        self.notes.push((id.to_owned(), text));
    }

    /// Records a benchmark that failed to produce its figure.
    pub fn error(&mut self, id: &str, what: &str, target: &str, error: &anyhow::Error) {
        self.row(id, what, "-".into(), "-".into(), target, Verdict::Error);
        self.note(id, format!("ERROR: {error:#}"));
    }

    /// Runs one benchmark, turning an error or a panic into an ERROR row
    /// (the panic unwinds through the benchmark's guards first, so its
    /// processes are gone), and goes on with the next.
    pub fn run(
        &mut self,
        id: &str,
        what: &str,
        target: &str,
        bench: impl FnOnce(&mut Report) -> anyhow::Result<()>,
    ) {
        self.run_many(&[(id, what, target)], bench);
    }

    /// Like [`Report::run`] for a benchmark that fills in several figures
    /// (`(id, what, target)` each): on failure, every figure it had not
    /// produced yet becomes an ERROR row.
    pub fn run_many(
        &mut self,
        figures: &[(&str, &str, &str)],
        bench: impl FnOnce(&mut Report) -> anyhow::Result<()>,
    ) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| bench(self)));
        let error = match result {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e,
            Err(panic) => {
                let text = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_else(|| "unknown panic".into());
                anyhow::anyhow!("panicked: {text}")
            }
        };
        for (id, what, target) in figures {
            if !self.rows.iter().any(|r| r.id == *id) {
                self.error(id, what, target, &error);
            }
        }
    }

    /// Whether any row is an error.
    pub fn has_errors(&self) -> bool {
        self.rows.iter().any(|r| r.verdict == Verdict::Error)
    }

    /// The table and the notes as text.
    pub fn render(&self, title: &str) -> String {
        let mut rows = self.rows.clone();
        rows.sort_by_key(|r| sort_key(&r.id));
        let header = [
            "what",
            "figure",
            "reference (same run)",
            "target",
            "verdict",
        ];
        let cells: Vec<[String; 5]> = rows
            .iter()
            .map(|r| {
                [
                    format!("{}. {}", r.id, r.what),
                    r.figure.clone(),
                    r.reference.clone(),
                    r.target.clone(),
                    r.verdict.as_str().to_owned(),
                ]
            })
            .collect();
        let mut width = header.map(|h| h.chars().count());
        for row in &cells {
            for (w, c) in width.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cols: &[String]| {
            let mut s = String::from("|");
            for (c, w) in cols.iter().zip(width) {
                let pad = w - c.chars().count();
                let _ = write!(s, " {c}{} |", " ".repeat(pad));
            }
            s
        };
        let mut out = String::new();
        let _ = writeln!(out, "\n## {title}\n");
        let _ = writeln!(out, "{}", machine_line());
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", line(&header.map(str::to_owned)));
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        let _ = writeln!(out, "{}", line(&rule).replace(' ', "-"));
        for row in &cells {
            let _ = writeln!(out, "{}", line(row));
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out, "\nNotes:");
            let mut notes = self.notes.clone();
            notes.sort_by_key(|(id, _)| sort_key(id));
            for (id, text) in notes {
                let _ = writeln!(out, "- [{id}] {text}");
            }
        }
        out
    }
}

/// Date, core count, CPU model and load average, so a table can be read
/// against the machine it came from.
pub fn machine_line() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    format!(
        "{} UTC · {cores} cores · {model} · load average {load}",
        crate::log::format_unix_us(crate::procs::realtime_us())
    )
}
