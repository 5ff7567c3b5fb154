//! A resource quantity as the kubelet holds it in memory — the value, scale, cached
//! string and format its parser leaves after a manifest is read and the API's defaults
//! round it up to milli-units — for the printed form its static pod UID hashes.
//!
//! Only quantities the parser keeps as a 64-bit integer with a scale are covered (all
//! the usual ones: `100m`, `250Mi`, `2`, `1.5`, `64Ki`); those it falls back to an
//! arbitrary-precision decimal for (`1.5Gi`, more than 18 digits) give `None`.

/// The parsed form: `value × 10^scale`, the input kept when it is canonical, the
/// format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quantity {
    value: i64,
    scale: i32,
    cached: String,
    format: &'static str,
}

/// What the suffix says: base-10 exponent (or base-2 for binary), and the format.
fn suffix(s: &str) -> Option<(i32, &'static str)> {
    let decimal = |e| Some((e, "DecimalSI"));
    let binary = |e| Some((e, "BinarySI"));
    match s {
        "" => decimal(0),
        "n" => decimal(-9),
        "u" => decimal(-6),
        "m" => decimal(-3),
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(10),
        "Mi" => binary(20),
        "Gi" => binary(30),
        "Ti" => binary(40),
        "Pi" => binary(50),
        "Ei" => binary(60),
        _ => {
            let e = s.strip_prefix(['e', 'E'])?;
            e.parse::<i32>().ok().map(|e| (e, "DecimalExponent"))
        }
    }
}

/// Sign, numerator without leading zeros, fraction digits and suffix.
fn split(s: &str) -> Option<(bool, &str, &str, &str)> {
    let (positive, rest) = match s.as_bytes().first() {
        Some(b'-') => (false, &s[1..]),
        Some(b'+') => (true, &s[1..]),
        _ => (true, s),
    };
    let rest = rest.trim_start_matches('0');
    let digits = |t: &str| t.bytes().take_while(u8::is_ascii_digit).count();
    let n = digits(rest);
    let num = if n == 0 { "0" } else { &rest[..n] };
    let mut tail = &rest[n..];
    let mut denom = "";
    if let Some(after) = tail.strip_prefix('.') {
        let d = digits(after);
        denom = &after[..d];
        tail = &after[d..];
    }
    Some((positive, num, denom, tail))
}

impl Quantity {
    /// Parses `s` as the API's quantity parser does, then — with `rounded`, for the
    /// values of resource lists — rounds it up to milli-units as the Pod defaults do.
    /// `None`: a form not covered.
    pub fn parse(s: &str, rounded: bool) -> Option<Quantity> {
        let mut q = Self::parse_exact(s)?;
        if rounded && q.scale < -3 {
            q.cached.clear();
            q.value = round_up(q.value, -3 - q.scale);
            q.scale = -3;
        }
        Some(q)
    }

    /// [`Quantity::parse`] of a JSON value (a string, or a number as YAML gives one).
    pub fn of_json(v: &serde_json::Value, rounded: bool) -> Option<Quantity> {
        match v {
            serde_json::Value::String(s) => Self::parse(s.trim(), rounded),
            serde_json::Value::Number(n) => Self::parse(&n.to_string(), rounded),
            _ => None,
        }
    }

    fn parse_exact(s: &str) -> Option<Quantity> {
        if s == "0" {
            return Some(Quantity {
                value: 0,
                scale: 0,
                cached: s.to_owned(),
                format: "DecimalSI",
            });
        }
        let (positive, num, denom, suf) = split(s)?;
        let (exponent, format) = suffix(suf)?;
        let digits = i32::try_from(num.len() + denom.len()).ok()?;
        let (mut scale, precision, mantissa) = if format == "BinarySI" {
            if !denom.is_empty() {
                return None;
            }
            let len = i32::try_from(num.len()).ok()?;
            // As the parser estimates it (float32 arithmetic, truncated).
            #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
            let estimate = (exponent as f32 * 3.0 / 10.0) as i32;
            (
                0,
                15 - len - estimate - 1,
                1_i64.checked_shl(u32::try_from(exponent).ok()?)?,
            )
        } else {
            (exponent, 18 - digits, 1)
        };
        if precision < 0 {
            return None;
        }
        scale -= i32::try_from(denom.len()).ok()?;
        if scale < -9 {
            return None;
        }
        let shifted = format!("{num}{denom}");
        let value: i64 = shifted.parse().ok()?;
        let mut result = value.checked_mul(mantissa)?;
        if !positive {
            result = -result;
        }
        let canonical = if format == "BinarySI" {
            exponent % 10 == 0 && value & 0x07 != 0
        } else {
            scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0')
        };
        Some(Quantity {
            value: result,
            scale,
            cached: if canonical {
                s.to_owned()
            } else {
                String::new()
            },
            format,
        })
    }

    /// The quantity as the API writes it: as it was read when that was canonical, the
    /// canonical form otherwise (`0.5` → `500m`, `1000` → `1k`, `2048Ki` → `2Mi`).
    pub fn canonical(&self) -> String {
        if !self.cached.is_empty() {
            return self.cached.clone();
        }
        if self.value == 0 {
            return "0".into();
        }
        let binary = self.format == "BinarySI"
            && !(-1024 < self.value && self.value < 1024 && self.scale == 0)
            && self.scale >= 0;
        if binary && let Some(whole) = scaled(self.value, self.scale) {
            let (mut amount, mut times) = (whole, 0);
            while amount.abs() >= 1024 && amount % 1024 == 0 {
                amount /= 1024;
                times += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].get(times).copied();
            return format!("{amount}{}", suffix.unwrap_or(""));
        }
        let (mut amount, mut exponent) = (self.value, self.scale);
        while amount.abs() >= 10 && amount % 10 == 0 {
            amount /= 10;
            exponent += 1;
        }
        match exponent.rem_euclid(3) {
            1 => {
                amount *= 10;
                exponent -= 1;
            }
            2 => {
                amount *= 100;
                exponent -= 2;
            }
            _ => {}
        }
        let suffix = if self.format == "DecimalExponent" {
            if exponent == 0 {
                String::new()
            } else {
                format!("e{exponent}")
            }
        } else {
            match exponent {
                -9 => "n",
                -6 => "u",
                -3 => "m",
                3 => "k",
                6 => "M",
                9 => "G",
                12 => "T",
                15 => "P",
                18 => "E",
                _ => "",
            }
            .to_owned()
        };
        format!("{amount}{suffix}")
    }

    /// The quantity as the hash prints it (its fields, unexported ones included).
    pub fn print(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = write!(
            out,
            "{{i:(resource.int64Amount){{value:(int64){} scale:(resource.Scale){}}} \
             d:(resource.infDecAmount){{Dec:(*inf.Dec)<nil>}} s:(string){} Format:(resource.Format){}}}",
            self.value, self.scale, self.cached, self.format
        );
    }
}

/// `value × 10^scale` for a non-negative scale, if it fits.
fn scaled(value: i64, scale: i32) -> Option<i64> {
    (0..scale).try_fold(value, |v, _| v.checked_mul(10))
}

/// `value` divided by `10^places`, any remainder rounding away from zero.
fn round_up(value: i64, places: i32) -> i64 {
    let mut v = value;
    let mut fraction = false;
    for _ in 0..places {
        fraction |= v % 10 != 0;
        v /= 10;
        if v == 0 {
            return match (fraction, value > 0) {
                (false, _) => 0,
                (true, true) => 1,
                (true, false) => -1,
            };
        }
    }
    match (fraction, value > 0) {
        (false, _) => v,
        (true, true) => v + 1,
        (true, false) => v - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> (i64, i32, String, &'static str) {
        let q = Quantity::parse(s, true).expect(s);
        (q.value, q.scale, q.cached, q.format)
    }

    #[test]
    fn quantities_are_held_as_the_api_parser_leaves_them() {
        assert_eq!(q("100m"), (100, -3, "100m".into(), "DecimalSI"));
        assert_eq!(q("250m"), (250, -3, "250m".into(), "DecimalSI"));
        assert_eq!(q("100Mi"), (104_857_600, 0, "100Mi".into(), "BinarySI"));
        // 128 is a multiple of 8: not kept as written.
        assert_eq!(q("128Mi"), (134_217_728, 0, String::new(), "BinarySI"));
        assert_eq!(q("2"), (2, 0, "2".into(), "DecimalSI"));
        assert_eq!(q("0"), (0, 0, "0".into(), "DecimalSI"));
        assert_eq!(q("1000"), (1000, 0, String::new(), "DecimalSI"));
        assert_eq!(q("0.5"), (5, -1, String::new(), "DecimalSI"));
        assert_eq!(q("1G"), (1, 9, "1G".into(), "DecimalSI"));
        assert_eq!(q("1e3"), (1, 3, "1e3".into(), "DecimalExponent"));
        // Below a milli-unit: rounded up, and the string dropped.
        assert_eq!(q("1500u"), (2, -3, String::new(), "DecimalSI"));
        assert_eq!(Quantity::parse("1500u", false).map(|q| q.scale), Some(-6));
        let canonical = |s: &str| Quantity::parse(s, true).expect(s).canonical();
        assert_eq!(canonical("0.5"), "500m");
        assert_eq!(canonical("1000"), "1k");
        assert_eq!(canonical("128Mi"), "128Mi");
        assert_eq!(canonical("2048Ki"), "2Mi");
        assert_eq!(canonical("100m"), "100m");
        assert_eq!(canonical("1500u"), "2m");
        assert_eq!(canonical("1e3"), "1e3");
        assert_eq!(canonical("10e2"), "1e3");
        assert_eq!(canonical("512"), "512");
        assert_eq!(
            Quantity::parse("1.5Gi", true),
            None,
            "an inf.Dec: not covered"
        );
        assert_eq!(Quantity::parse("12x", true), None);
    }
}
