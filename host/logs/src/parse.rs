//! The CRI container log format, one line per write:
//! `2016-10-06T00:17:09.669794202Z stdout F the message` — an RFC 3339 timestamp, the
//! stream, tags (`F` full line, `P` partial: the line goes on in the next record), and
//! the content. A long line is split by the runtime into `P` records ending in one `F`.

/// The stream a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One parsed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Unix nanoseconds.
    pub time: i64,
    /// The stream.
    pub stream: Stream,
    /// The line goes on in the next record (its content carries no newline).
    pub partial: bool,
    /// The content, without the record's newline.
    pub content: &'a [u8],
}

/// A line that is not a CRI log record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// No timestamp, or one that is not RFC 3339.
    #[error("log record has no valid timestamp")]
    Time,
    /// Neither `stdout` nor `stderr`.
    #[error("log record has no stream (stdout or stderr)")]
    Stream,
    /// No tag field.
    #[error("log record has no tag (F or P)")]
    Tag,
}

fn field(rest: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = rest.iter().position(|b| *b == b' ')?;
    Some((&rest[..i], &rest[i + 1..]))
}

/// Parses one record; `line` may end in its newline.
pub fn parse(line: &[u8]) -> Result<Record<'_>, ParseError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let (time, rest) = field(line).ok_or(ParseError::Time)?;
    let time = parse_time(time).ok_or(ParseError::Time)?;
    let (stream, rest) = field(rest).ok_or(ParseError::Stream)?;
    let stream = match stream {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return Err(ParseError::Stream),
    };
    // The tag field: `F` or `P`, possibly with more tags after a `:`. A record with
    // empty content may end right after the tag.
    let (tags, content) = match field(rest) {
        Some((tags, content)) => (tags, content),
        None if !rest.is_empty() => (rest, &b""[..]),
        None => return Err(ParseError::Tag),
    };
    let first = tags.split(|b| *b == b':').next().unwrap_or_default();
    if first.is_empty() {
        return Err(ParseError::Tag);
    }
    Ok(Record {
        time,
        stream,
        partial: first == b"P",
        content,
    })
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

/// Unix nanoseconds as the kubelet prints them with `timestamps=true`:
/// `2006-01-02T15:04:05.000000000Z` (UTC, nine digits).
pub fn format_time(nanos: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(wasmlet_cri::labels::rfc3339_nanos(nanos).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_full_partial_and_empty() {
        let r = parse(b"2016-10-06T00:17:09.669794202Z stdout F hello world\n").expect("full");
        assert_eq!(r.stream, Stream::Stdout);
        assert!(!r.partial);
        assert_eq!(r.content, b"hello world");
        assert_eq!(r.time, 1_475_713_029_669_794_202);
        let r = parse(b"2016-10-06T00:17:09.669794202Z stderr P part").expect("partial");
        assert!(r.partial);
        assert_eq!(r.stream, Stream::Stderr);
        assert_eq!(r.content, b"part");
        let r = parse(b"2016-10-06T00:17:09Z stdout F \n").expect("empty line");
        assert_eq!(r.content, b"");
        let r = parse(b"2016-10-06T00:17:09Z stdout F").expect("no space after the tag");
        assert_eq!(r.content, b"");
        let r = parse(b"2016-10-06T00:17:09Z stdout F:x  two  spaces").expect("more tags");
        assert_eq!(r.content, b" two  spaces");
        for bad in [
            &b"hello"[..],
            b"2016-10-06 stdout F x",
            b"2016-10-06T00:17:09Z stdin F x",
            b"2016-10-06T00:17:09Z stdout",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn times_with_offsets_and_any_fraction() {
        let z = parse_time(b"2024-02-29T12:00:00Z").expect("z");
        assert_eq!(parse_time(b"2024-02-29T14:00:00+02:00"), Some(z));
        assert_eq!(parse_time(b"2024-02-29T11:30:00-00:30"), Some(z));
        assert_eq!(parse_time(b"2024-02-29T12:00:00.5Z"), Some(z + 500_000_000));
        assert_eq!(parse_time(b"1970-01-01T00:00:00.000000001Z"), Some(1));
        assert_eq!(parse_time(b"2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_time(b"2024-02-29T12:00:00"), None);
        let mut out = Vec::new();
        format_time(z + 42, &mut out);
        assert_eq!(out, b"2024-02-29T12:00:00.000000042Z");
    }
}
