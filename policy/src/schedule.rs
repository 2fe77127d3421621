//! Recycle schedules (`recycle.at`): the clock times at which a child is
//! recycled, in the supervisor's local time zone, as gunicorn and PM2 users
//! know them from `cron_restart`.
//!
//! Each entry is either a daily time `"HH:MM"` (or `"HH:MM:SS"`) or a five-field cron
//! expression `"minute hour day-of-month month day-of-week"`, each field
//! `*`, a number, a range `a-b`, a list `a,b,c`, or a step `*/n` / `a-b/n`
//! (day-of-week 0–7, both 0 and 7 Sunday). As in cron, when both
//! day-of-month and day-of-week are restricted, a day matching either is
//! taken. The entries of a schedule are a union.
//!
//! Everything here is civil time ([`Civil`]: a calendar date and a minute
//! of the day, no zone): the supervisor converts to and from its local
//! time, so daylight-saving changes are its conversion's business (a time
//! that does not exist that day fires when the clock skips past it).

use std::fmt;

/// A second of the calendar, in some time zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Civil {
    /// The year.
    pub year: i32,
    /// 1–12.
    pub month: u32,
    /// 1–31.
    pub day: u32,
    /// 0–23.
    pub hour: u32,
    /// 0–59.
    pub minute: u32,
    /// 0–59.
    pub second: u32,
}

impl fmt::Display for Civil {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

/// Days in `month` of `year` (Gregorian).
fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Day of the week of a date, 0 = Sunday (Sakamoto's method).
fn weekday(year: i32, month: u32, day: u32) -> u32 {
    const T: [i32; 12] = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];
    // Years here are a few thousand at most: i64 cannot overflow.
    let y = i64::from(if month < 3 {
        year.saturating_sub(1)
    } else {
        year
    });
    let t = i64::from(
        T.get(month.saturating_sub(1) as usize)
            .copied()
            .unwrap_or(0),
    );
    let w = y
        .saturating_add(y / 4)
        .saturating_sub(y / 100)
        .saturating_add(y / 400)
        .saturating_add(t)
        .saturating_add(i64::from(day))
        .rem_euclid(7);
    u32::try_from(w).unwrap_or(0)
}

/// A set of allowed values of one field, as a bit mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    bits: u64,
    /// Written as `*` (matters for the day fields' either-or rule).
    any: bool,
}

impl Field {
    fn has(self, v: u32) -> bool {
        v < 64 && self.bits & (1 << v) != 0
    }

    /// Parses one cron field whose values lie in `lo..=hi`.
    fn parse(text: &str, lo: u32, hi: u32, name: &str) -> Result<Self, String> {
        let mut bits = 0u64;
        let any = text == "*";
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((r, s)) => {
                    let step: u32 = s.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        format!("{name}: step {s:?} is not a whole number above 0")
                    })?;
                    (r, step)
                }
                None => (part, 1),
            };
            let (a, b) = if range == "*" {
                (lo, hi)
            } else if let Some((a, b)) = range.split_once('-') {
                (number(a, lo, hi, name)?, number(b, lo, hi, name)?)
            } else {
                let a = number(range, lo, hi, name)?;
                // `5/10` means from 5 to the end, every 10.
                (a, if step > 1 { hi } else { a })
            };
            if a > b {
                return Err(format!("{name}: range {range:?} runs backwards"));
            }
            let mut v = a;
            while v <= b {
                bits |= 1 << v;
                v = v.saturating_add(step);
            }
        }
        Ok(Self { bits, any })
    }
}

fn number(text: &str, lo: u32, hi: u32, name: &str) -> Result<u32, String> {
    text.parse::<u32>()
        .ok()
        .filter(|n| (lo..=hi).contains(n))
        .ok_or_else(|| format!("{name}: {text:?} is not a number from {lo} to {hi}"))
}

/// One entry: the minutes it allows, and the second within each.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    second: u32,
    minute: Field,
    hour: Field,
    day: Field,
    month: Field,
    weekday: Field,
}

impl Entry {
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.contains(':') && !text.contains(' ') {
            let parts: Vec<&str> = text.split(':').collect();
            let (h, m, sec) = match parts.as_slice() {
                [h, m] => (*h, *m, None),
                [h, m, s] => (*h, *m, Some(*s)),
                _ => return Err(format!("{text:?} is not \"HH:MM\" or \"HH:MM:SS\"")),
            };
            let hour = number(h, 0, 23, "hour")?;
            let minute = number(m, 0, 59, "minute")?;
            let second = sec.map_or(Ok(0), |s| number(s, 0, 59, "second"))?;
            if m.len() != 2 || sec.is_some_and(|s| s.len() != 2) {
                return Err(format!(
                    "minutes and seconds in {text:?} must have two digits"
                ));
            }
            let all = |lo, hi, name| Field::parse("*", lo, hi, name);
            return Ok(Self {
                second,
                minute: Field::parse(&minute.to_string(), 0, 59, "minute")?,
                hour: Field::parse(&hour.to_string(), 0, 23, "hour")?,
                day: all(1, 31, "day of month")?,
                month: all(1, 12, "month")?,
                weekday: all(0, 7, "day of week")?,
            });
        }
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields.as_slice() else {
            return Err(format!(
                "{text:?} is neither \"HH:MM\" nor five cron fields (minute hour day-of-month month day-of-week)"
            ));
        };
        let mut weekday = Field::parse(weekday, 0, 7, "day of week")?;
        if weekday.has(7) {
            weekday.bits |= 1;
        }
        Ok(Self {
            second: 0,
            minute: Field::parse(minute, 0, 59, "minute")?,
            hour: Field::parse(hour, 0, 23, "hour")?,
            day: Field::parse(day, 1, 31, "day of month")?,
            month: Field::parse(month, 1, 12, "month")?,
            weekday,
        })
    }

    fn day_matches(&self, year: i32, month: u32, day: u32) -> bool {
        if !self.month.has(month) {
            return false;
        }
        let by_date = self.day.has(day);
        let by_weekday = self.weekday.has(weekday(year, month, day));
        match (self.day.any, self.weekday.any) {
            (true, true) => true,
            (false, true) => by_date,
            (true, false) => by_weekday,
            (false, false) => by_date || by_weekday,
        }
    }

    /// The first allowed second of the day at or after `from` seconds
    /// into it.
    fn first_second(&self, from: u32) -> Option<u32> {
        (from / 60..24 * 60)
            .filter(|&m| self.hour.has(m / 60) && self.minute.has(m % 60))
            .map(|m| m.saturating_mul(60).saturating_add(self.second))
            .find(|&t| t >= from)
    }
}

/// When children of a deployment are recycled by the clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    entries: Vec<Entry>,
}

/// How far ahead a schedule is searched: one that never fires within
/// this many years (e.g. "30 2 31 2 *", February 31st) never fires.
const SEARCH_YEARS: i32 = 8;

impl Schedule {
    /// Parses `recycle.at`'s entries; the error names the entry and the
    /// field.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        let mut parsed = Vec::with_capacity(entries.len());
        for e in entries {
            let e = e.as_ref();
            parsed.push(Entry::parse(e).map_err(|why| format!("recycle.at {e:?}: {why}"))?);
        }
        let schedule = Self { entries: parsed };
        let probe = Civil {
            year: 2000,
            month: 1,
            day: 1,
            hour: 0,
            minute: 0,
            second: 0,
        };
        if !schedule.entries.is_empty() && schedule.next_after(probe).is_none() {
            return Err(format!(
                "recycle.at {:?} never fires: no such day in {SEARCH_YEARS} years",
                entries.iter().map(AsRef::as_ref).collect::<Vec<_>>()
            ));
        }
        Ok(schedule)
    }

    /// Whether the schedule has no entry (never fires).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The first scheduled second strictly after `at`.
    pub fn next_after(&self, at: Civil) -> Option<Civil> {
        let (mut year, mut month, mut day) = (at.year, at.month, at.day);
        let mut from = at
            .hour
            .saturating_mul(3600)
            .saturating_add(at.minute.saturating_mul(60))
            .saturating_add(at.second)
            .saturating_add(1);
        for _ in 0..SEARCH_YEARS.saturating_mul(366) {
            let second = self
                .entries
                .iter()
                .filter(|e| e.day_matches(year, month, day))
                .filter_map(|e| e.first_second(from))
                .min();
            if let Some(t) = second {
                return Some(Civil {
                    year,
                    month,
                    day,
                    hour: t / 3600,
                    minute: t / 60 % 60,
                    second: t % 60,
                });
            }
            from = 0;
            day = day.saturating_add(1);
            if day > days_in_month(year, month) {
                day = 1;
                month = month.saturating_add(1);
                if month > 12 {
                    month = 1;
                    year = year.saturating_add(1);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(year: i32, month: u32, day: u32, hour: u32, minute: u32) -> Civil {
        Civil {
            year,
            month,
            day,
            hour,
            minute,
            second: 0,
        }
    }

    fn next(entries: &[&str], from: Civil) -> Option<Civil> {
        Schedule::parse(entries).unwrap().next_after(from)
    }

    #[test]
    fn a_daily_time_fires_today_if_still_ahead_else_tomorrow() {
        let s = ["03:00"];
        assert_eq!(
            next(&s, at(2026, 12, 1, 2, 59)),
            Some(at(2026, 12, 1, 3, 0))
        );
        assert_eq!(next(&s, at(2026, 12, 1, 3, 0)), Some(at(2026, 12, 2, 3, 0)));
        assert_eq!(next(&s, at(2026, 12, 31, 4, 0)), Some(at(2027, 1, 1, 3, 0)));
    }

    #[test]
    fn a_daily_time_may_name_its_second() {
        let s = ["03:00:30"];
        let mut from = at(2026, 12, 1, 3, 0);
        from.second = 29;
        let mut want = from;
        want.second = 30;
        assert_eq!(next(&s, from), Some(want));
        from.second = 30;
        want.day = 2;
        assert_eq!(next(&s, from), Some(want));
        assert_eq!(want.to_string(), "2026-12-02 03:00:30");
    }

    #[test]
    fn entries_are_a_union() {
        let s = ["03:00", "15:30"];
        assert_eq!(
            next(&s, at(2026, 12, 1, 3, 0)),
            Some(at(2026, 12, 1, 15, 30))
        );
        assert_eq!(
            next(&s, at(2026, 12, 1, 16, 0)),
            Some(at(2026, 12, 2, 3, 0))
        );
    }

    #[test]
    fn cron_fields_steps_ranges_and_lists() {
        assert_eq!(
            next(&["*/15 * * * *"], at(2026, 12, 1, 10, 7)),
            Some(at(2026, 12, 1, 10, 15))
        );
        assert_eq!(
            next(&["0 9-17/4 * * *"], at(2026, 12, 1, 9, 0)),
            Some(at(2026, 12, 1, 13, 0))
        );
        assert_eq!(
            next(&["5,35 2 * * *"], at(2026, 12, 1, 2, 5)),
            Some(at(2026, 12, 1, 2, 35))
        );
        // Mondays at 04:00: 2026-12-01 is a Tuesday.
        assert_eq!(
            next(&["0 4 * * 1"], at(2026, 12, 1, 0, 0)),
            Some(at(2026, 12, 7, 4, 0))
        );
        // 7 is Sunday too.
        assert_eq!(
            next(&["0 4 * * 7"], at(2026, 12, 1, 0, 0)),
            Some(at(2026, 12, 6, 4, 0))
        );
    }

    #[test]
    fn both_day_fields_restricted_means_either() {
        // The 15th or any Friday: Friday 2026-12-04 comes first.
        assert_eq!(
            next(&["0 0 15 * 5"], at(2026, 12, 1, 0, 0)),
            Some(at(2026, 12, 4, 0, 0))
        );
        // Only the 15th.
        assert_eq!(
            next(&["0 0 15 * *"], at(2026, 12, 1, 0, 0)),
            Some(at(2026, 12, 15, 0, 0))
        );
    }

    #[test]
    fn leap_days_are_found_and_impossible_days_refused() {
        assert_eq!(
            next(&["0 0 29 2 *"], at(2026, 12, 1, 0, 0)),
            Some(at(2028, 2, 29, 0, 0))
        );
        let err = Schedule::parse(&["0 0 31 2 *"]).unwrap_err();
        assert!(err.contains("never fires"), "{err}");
    }

    #[test]
    fn bad_entries_name_the_entry_and_the_field() {
        for (entry, says) in [
            ("25:00", "hour"),
            ("3:0", "two digits"),
            ("03:00:7", "two digits"),
            ("03:00:60", "second"),
            ("03:00:00:00", "HH:MM:SS"),
            ("61 * * * *", "minute"),
            ("* * * *", "five cron fields"),
            ("*/0 * * * *", "step"),
            ("0 5-2 * * *", "backwards"),
            ("0 0 0 * *", "day of month"),
            ("0 0 * 13 *", "month"),
            ("0 0 * * 8", "day of week"),
        ] {
            let err = Schedule::parse(&[entry]).unwrap_err();
            assert!(err.contains(entry) && err.contains(says), "{entry}: {err}");
        }
    }

    #[test]
    fn weekdays_of_known_dates() {
        assert_eq!(weekday(2026, 12, 1), 2, "a Tuesday");
        assert_eq!(weekday(2000, 1, 1), 6, "a Saturday");
        assert_eq!(weekday(2024, 2, 29), 4, "a Thursday");
    }

    #[test]
    fn an_empty_schedule_never_fires() {
        let s = Schedule::parse::<&str>(&[]).unwrap();
        assert!(s.is_empty());
        assert_eq!(s.next_after(at(2026, 1, 1, 0, 0)), None);
    }
}
