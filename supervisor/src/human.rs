//! Durations and sizes as people read them at a glance, rounded (the
//! config's own spellings, exact, are `format_duration` and `format_size`).

/// "512B", "3.4MiB", "1.2GiB".
pub fn bytes(b: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = b as f64;
    if f < KIB {
        format!("{b}B")
    } else if f < KIB * KIB {
        format!("{:.1}KiB", f / KIB)
    } else if f < KIB * KIB * KIB {
        format!("{:.1}MiB", f / (KIB * KIB))
    } else {
        format!("{:.1}GiB", f / (KIB * KIB * KIB))
    }
}

/// "4.2s", "3m05s", "2h01m", "3d04h".
pub fn ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{}.{}s", s, (ms % 1000) / 100),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounded_for_people() {
        assert_eq!(ms(4_250), "4.2s");
        assert_eq!(ms(185_000), "3m05s");
        assert_eq!(ms(7_260_000), "2h01m");
        assert_eq!(ms(273_600_000), "3d04h");
        assert_eq!(bytes(512), "512B");
        assert_eq!(bytes(5 << 20), "5.0MiB");
        assert_eq!(bytes(3 << 30), "3.0GiB");
    }
}
