//! The supervisor's local time zone (the C library's: `TZ`, else
//! `/etc/localtime`), for `recycle.at` schedules, which people write in
//! wall-clock time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wfhost_policy::schedule::Civil;

/// The local calendar second of `at` (its fraction dropped).
pub fn civil_of(at: SystemTime) -> Option<Civil> {
    let secs = at.duration_since(UNIX_EPOCH).ok()?.as_secs();
    let t = libc::time_t::try_from(secs).ok()?;
    // SAFETY: `tm` is plain data; localtime_r writes it and reads only `t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; localtime_r is the
    // thread-safe variant.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        return None;
    }
    Some(Civil {
        year: tm.tm_year.checked_add(1900)?,
        month: u32::try_from(tm.tm_mon.checked_add(1)?).ok()?,
        day: u32::try_from(tm.tm_mday).ok()?,
        hour: u32::try_from(tm.tm_hour).ok()?,
        minute: u32::try_from(tm.tm_min).ok()?,
        // A leap second (60) is read as the one before it.
        second: u32::try_from(tm.tm_sec).ok()?.min(59),
    })
}

/// The moment a local calendar second begins. A time that does not
/// exist that day (the hour skipped when daylight saving starts) is the
/// moment the clock skips past it; one that exists twice is its first.
pub fn time_of(civil: Civil) -> Option<SystemTime> {
    // SAFETY: plain data, filled in below.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = civil.year.checked_sub(1900)?;
    tm.tm_mon = i32::try_from(civil.month).ok()?.checked_sub(1)?;
    tm.tm_mday = i32::try_from(civil.day).ok()?;
    tm.tm_hour = i32::try_from(civil.hour).ok()?;
    tm.tm_min = i32::try_from(civil.minute).ok()?;
    tm.tm_sec = i32::try_from(civil.second).ok()?;
    // Let the C library decide whether daylight saving is in force.
    tm.tm_isdst = -1;
    // SAFETY: `tm` is valid; mktime normalises it in place.
    let t = unsafe { libc::mktime(&mut tm) };
    let secs = u64::try_from(t).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_round_trips_through_local_time() {
        let now = SystemTime::now();
        let civil = civil_of(now).expect("local time");
        let back = time_of(civil).expect("mktime");
        let lag = now
            .duration_since(back)
            .expect("the second began before now");
        assert!(lag < Duration::from_secs(1), "{lag:?}");
        assert_eq!(civil_of(back), Some(civil));
    }
}
