//! `GET /containerLogs/{namespace}/{pod}/{container}`: the request's query, checked
//! parameter by parameter. Reading the file is `wasmlet-logs`' ([`read`], [`parse`]).

pub use wasmlet_logs::{LogOptions, parse, read};

/// A query parameter that is not usable, naming it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// Not of the parameter's type: 400.
    #[error("{param}: {value:?} is not {expected}")]
    Malformed {
        /// The parameter.
        param: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// Of the right type but not allowed: 422, as the kubelet answers.
    #[error("{param}: {why}")]
    Invalid {
        /// The parameter.
        param: &'static str,
        /// Why.
        why: &'static str,
    },
}

/// A boolean the API's way: absent is false; `false` and `0` are false; any other
/// value, the empty one included, is true.
fn boolean(value: &str) -> bool {
    !matches!(value.to_ascii_lowercase().as_str(), "false" | "0")
}

fn integer(param: &'static str, value: &str) -> Result<i64, QueryError> {
    value.parse().map_err(|_| QueryError::Malformed {
        param,
        value: value.to_owned(),
        expected: "an integer",
    })
}

/// The log options of a query string (`follow`, `previous`, `timestamps`,
/// `tailLines` — or the older `tail`, where `all` means every line —, `limitBytes`,
/// `sinceSeconds`, `sinceTime`); `now` is the current time in Unix nanoseconds.
pub fn query(pairs: &[(String, String)], now: i64) -> Result<LogOptions, QueryError> {
    let mut o = LogOptions::default();
    let mut since_seconds = None;
    let mut since_time = None;
    for (k, v) in pairs {
        match k.as_str() {
            "follow" => o.follow = boolean(v),
            "previous" => o.previous = boolean(v),
            "timestamps" => o.timestamps = boolean(v),
            "tailLines" | "tail" if v == "all" && k == "tail" => o.tail_lines = None,
            "tailLines" | "tail" => {
                let n = integer("tailLines", v)?;
                o.tail_lines = Some(u64::try_from(n).map_err(|_| QueryError::Invalid {
                    param: "tailLines",
                    why: "must be greater than or equal to 0",
                })?);
            }
            "limitBytes" => {
                let n = integer("limitBytes", v)?;
                if n < 1 {
                    return Err(QueryError::Invalid {
                        param: "limitBytes",
                        why: "must be greater than 0",
                    });
                }
                o.limit_bytes = u64::try_from(n).ok();
            }
            "sinceSeconds" => {
                let n = integer("sinceSeconds", v)?;
                if n < 1 {
                    return Err(QueryError::Invalid {
                        param: "sinceSeconds",
                        why: "must be greater than 0",
                    });
                }
                since_seconds = Some(n);
            }
            "sinceTime" => {
                since_time =
                    Some(
                        parse::parse_time(v.as_bytes()).ok_or_else(|| QueryError::Malformed {
                            param: "sinceTime",
                            value: v.clone(),
                            expected: "an RFC 3339 time",
                        })?,
                    );
            }
            // container (the path names it), insecureSkipTLSVerifyBackend (for the API
            // server), and anything newer are not the node's business.
            _ => {}
        }
    }
    o.since_nanos = match (since_seconds, since_time) {
        (Some(_), Some(_)) => {
            return Err(QueryError::Invalid {
                param: "sinceSeconds",
                why: "at most one of `sinceTime` or `sinceSeconds` may be specified",
            });
        }
        (Some(s), None) => Some(now.saturating_sub(s.saturating_mul(1_000_000_000))),
        (None, t) => t,
    };
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(text: &str) -> Result<LogOptions, QueryError> {
        let pairs: Vec<(String, String)> = text
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => (p.to_owned(), String::new()),
            })
            .collect();
        query(&pairs, 100_000_000_000)
    }

    #[test]
    fn parameters_are_read_the_apis_way() {
        let o = q("follow=true&previous=1&timestamps&tailLines=10&limitBytes=5").expect("ok");
        assert!(o.follow && o.previous && o.timestamps);
        assert_eq!((o.tail_lines, o.limit_bytes), (Some(10), Some(5)));
        assert!(!q("follow=false").expect("ok").follow);
        assert_eq!(q("tail=all").expect("ok").tail_lines, None);
        assert_eq!(q("tail=3").expect("ok").tail_lines, Some(3));
        assert_eq!(
            q("sinceSeconds=10").expect("ok").since_nanos,
            Some(90_000_000_000)
        );
        assert_eq!(
            q("sinceTime=1970-01-01T00:01:00Z").expect("ok").since_nanos,
            Some(60_000_000_000)
        );
    }

    #[test]
    fn bad_parameters_are_named() {
        for (text, param, malformed) in [
            ("tailLines=ten", "tailLines", true),
            ("tailLines=-1", "tailLines", false),
            ("limitBytes=0", "limitBytes", false),
            ("limitBytes=x", "limitBytes", true),
            ("sinceSeconds=0", "sinceSeconds", false),
            ("sinceTime=yesterday", "sinceTime", true),
            (
                "sinceSeconds=5&sinceTime=1970-01-01T00:01:00Z",
                "sinceSeconds",
                false,
            ),
        ] {
            let e = q(text).expect_err(text);
            assert!(e.to_string().starts_with(param), "{text}: {e}");
            assert_eq!(
                matches!(e, QueryError::Malformed { .. }),
                malformed,
                "{text}"
            );
        }
    }
}
