//! Value parsers shared by the command line and the configuration file: durations, sizes,
//! `KEY=VALUE` pairs and `Name: value` headers.

use std::time::Duration;

use http::header::{HeaderName, HeaderValue};

/// `KEY=VALUE` (the key must not be empty).
pub fn parse_kv(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("expected KEY=VALUE, got {s:?}")),
    }
}

/// The longest duration any flag or key accepts: a year. Longer values are refused rather than
/// clamped, and the bound keeps `Instant::now() + d` from overflowing anywhere downstream.
pub const MAX_DURATION_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// A number of seconds as a `Duration`, refused when negative, not finite or over a year.
pub fn duration_from_secs(secs: f64) -> Result<Duration, String> {
    if !secs.is_finite() || secs < 0.0 {
        return Err("a duration must be a finite, non-negative number".into());
    }
    if secs > MAX_DURATION_SECS {
        return Err("a duration must not exceed a year (8760h)".into());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `250ms`, `10s`, `5m`, `1h`, or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, ""), |i| s.split_at(i));
    let n: f64 = num.parse().map_err(|_| format!("not a duration: {s:?}"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown duration unit in {s:?} (use ms, s, m, h)")),
    };
    duration_from_secs(secs).map_err(|e| format!("{e}: {s:?}"))
}

/// `1024`, `64K`, `64KiB`, `16M`, `16MiB`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: usize = num.parse().map_err(|_| format!("not a size: {s:?}"))?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1024,
        "m" | "mb" | "mib" => 1024 * 1024,
        "g" | "gb" | "gib" => 1024 * 1024 * 1024,
        _ => return Err(format!("unknown size unit in {s:?}")),
    };
    n.checked_mul(mult)
        .filter(|v| *v > 0)
        .ok_or_else(|| format!("size out of range: {s:?}"))
}

/// Parse "Name: value" into a header (value marked sensitive). Errors never repeat the value.
pub fn parse_header(line: &str) -> Result<(HeaderName, HeaderValue), String> {
    let Some((k, v)) = line.split_once(':') else {
        return Err("expected \"Name: value\"".into());
    };
    let name = HeaderName::from_bytes(k.trim().as_bytes())
        .map_err(|_| format!("invalid header name {:?}", k.trim()))?;
    let mut value =
        HeaderValue::from_str(v.trim()).map_err(|_| format!("invalid value for header {name}"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("5y").is_err());
        // Found by the config_file fuzz target: a 130-digit minute count overflowed `Duration`.
        assert!(parse_duration(&format!("{}5m", "4".repeat(130))).is_err());
        assert!(parse_duration("8761h").is_err());
        assert_eq!(
            parse_duration("8760h").unwrap(),
            Duration::from_secs(365 * 86400)
        );
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("0").is_err());
    }

    #[test]
    fn headers_and_pairs() {
        assert!(parse_header("no colon").is_err());
        assert!(parse_header("Bad Name: x").is_err());
        let (n, v) = parse_header("X-Ok:  v ").unwrap();
        assert_eq!((n.as_str(), v.to_str().unwrap()), ("x-ok", "v"));
        assert!(v.is_sensitive());
        let e = parse_header("X-Bad: a\u{1}secret").unwrap_err();
        assert!(!e.contains("secret"), "{e}");
        assert_eq!(parse_kv("A=1=2").unwrap(), ("A".into(), "1=2".into()));
        assert!(parse_kv("=1").is_err());
    }
}
