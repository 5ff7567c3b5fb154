//! The CRI container log format, one line per write:
//! `2016-10-06T00:17:09.669794202Z stdout F the message` — an RFC 3339 timestamp, the
//! stream, tags (`F` full line, `P` partial: the line goes on in the next record), and
//! the content. A long line is split by the runtime into `P` records ending in one `F`.

/// RFC 3339 → Unix nanoseconds (the timestamps of records, `sinceTime`).
pub use wasmlet_cri::labels::parse_time;

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
    fn times_format_as_the_kubelet_prints_them() {
        let z = parse_time(b"2024-02-29T12:00:00Z").expect("z");
        let mut out = Vec::new();
        format_time(z + 42, &mut out);
        assert_eq!(out, b"2024-02-29T12:00:00.000000042Z");
    }
}
