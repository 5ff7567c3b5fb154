//! Time as the CRI and the API write it: RFC 3339 in UTC, printed and parsed without a
//! clock (the civil date from days since the epoch and back, Howard Hinnant's
//! algorithms).

/// Unix seconds as `2026-11-22T10:00:00` (UTC, no zone): the civil date from days
/// since the epoch (Howard Hinnant's algorithm).
fn date_time(unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    let rem = unix_secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Unix seconds as the API prints times: `2026-11-22T10:00:00Z`.
pub fn rfc3339_secs(unix_secs: i64) -> String {
    format!("{}Z", date_time(unix_secs))
}

/// Unix nanoseconds as a CRI log record's timestamp (and the kubelet's
/// `timestamps=true` prefix): `2026-11-22T10:00:00.000000042Z`, UTC, nine digits.
pub fn rfc3339_nanos(nanos: i64) -> String {
    format!(
        "{}.{:09}Z",
        date_time(nanos.div_euclid(1_000_000_000)),
        nanos.rem_euclid(1_000_000_000)
    )
}

/// RFC 3339 (`2016-10-06T00:17:09.669794202Z`, `…+02:00`, any fraction) → Unix
/// nanoseconds.
pub fn parse_time(s: &[u8]) -> Option<i64> {
    if s.len() < 20 || s[4] != b'-' || s[7] != b'-' || !matches!(s[10], b'T' | b't') {
        return None;
    }
    if s[13] != b':' || s[16] != b':' {
        return None;
    }
    let (y, mo, d) = (digits(&s[0..4])?, digits(&s[5..7])?, digits(&s[8..10])?);
    let (h, mi, sec) = (
        digits(&s[11..13])?,
        digits(&s[14..16])?,
        digits(&s[17..19])?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0i64;
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        for (i, b) in frac[..n].iter().enumerate().take(9) {
            nanos += i64::from(b - b'0') * 10i64.pow(8 - i as u32);
        }
        rest = &frac[n..];
    }
    let offset = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), hh1, hh2, b':', mm1, mm2] => {
            let mins = digits(&[*hh1, *hh2])? * 60 + digits(&[*mm1, *mm2])?;
            if *sign == b'+' { mins * 60 } else { -mins * 60 }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0i64, |n, d| {
        n.checked_mul(10)?.checked_add(i64::from(d - b'0'))
    })
}

/// Days from the civil date to 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_rfc3339() {
        assert_eq!(rfc3339_secs(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_secs(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_nanos(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            rfc3339_nanos(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123456789Z"
        );
        assert_eq!(rfc3339_nanos(-1), "1969-12-31T23:59:59.999999999Z");
    }

    #[test]
    fn times_parse_with_offsets_and_any_fraction() {
        let z = parse_time(b"2024-02-29T12:00:00Z").expect("z");
        assert_eq!(parse_time(b"2024-02-29T14:00:00+02:00"), Some(z));
        assert_eq!(parse_time(b"2024-02-29T11:30:00-00:30"), Some(z));
        assert_eq!(parse_time(b"2024-02-29T12:00:00.5Z"), Some(z + 500_000_000));
        assert_eq!(parse_time(b"1970-01-01T00:00:00.000000001Z"), Some(1));
        assert_eq!(parse_time(b"2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_time(b"2024-02-29T12:00:00"), None);
        assert_eq!(rfc3339_nanos(z + 42), "2024-02-29T12:00:00.000000042Z");
    }
}
