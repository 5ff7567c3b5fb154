//! Quantities and durations as Kubernetes writes them, read into the integers and
//! durations the kubelet compares.

/// The API's binary suffixes by power of 1024 (`Mi` for 2).
pub const BINARY_SUFFIXES: [&str; 6] = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];

/// `bytes` in the largest power of 1024 that divides it (at most 1024⁵): the value and
/// the power, 0 for bytes. `2 << 20` is `(2, 2)` (2 Mi); 0 and 1536 stay `(n, 0)`.
/// Each caller names the power in its own units (`Mi`, `MB`).
pub fn binary_scaled(bytes: u64) -> (u64, usize) {
    let (mut value, mut power) = (bytes, 0);
    while power < 5 && value != 0 && value.is_multiple_of(1024) {
        value /= 1024;
        power += 1;
    }
    (value, power)
}

/// A quantity that does not read (its text as written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not a quantity at all.
    #[error("invalid quantity {0:?}")]
    Invalid(String),
    /// Below zero, which no request, limit or capacity may be.
    #[error("quantity {0:?} is negative")]
    Negative(String),
    /// Past what a `u64` holds at the scale asked for.
    #[error("quantity {0:?} is too large")]
    TooLarge(String),
}

/// A duration that does not read (its text as written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {0:?} (expected e.g. 500ms, 1s, 1m30s)")]
pub struct DurationError(pub String);

/// Parses a Kubernetes quantity (`500m`, `1.5Gi`, `2e3`, `128974848`) and returns it
/// multiplied by `10^scale`, rounded up: scale 3 gives millicores, scale 0 bytes.
/// Negative quantities are refused (requests, limits and capacities cannot be negative).
pub fn parse_quantity(text: &str, scale: i32) -> Result<u64, QuantityError> {
    let s = text.trim();
    let invalid = || QuantityError::Invalid(text.to_owned());
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let number = number.strip_prefix('+').unwrap_or(number);
    if number.starts_with('-') {
        return Err(QuantityError::Negative(text.to_owned()));
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty()
        || !(whole.bytes().all(|b| b.is_ascii_digit())
            && fraction.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(invalid());
    }
    // value = mantissa · 10^exp10 · 2^exp2
    let mantissa_digits = format!("{whole}{fraction}");
    let mantissa_digits = mantissa_digits.trim_start_matches('0');
    if mantissa_digits.len() > 30 {
        return Err(QuantityError::TooLarge(text.to_owned()));
    }
    let mantissa: u128 = if mantissa_digits.is_empty() {
        0
    } else {
        mantissa_digits.parse().map_err(|_| invalid())?
    };
    let mut exp10 = scale - i32::try_from(fraction.len()).map_err(|_| invalid())?;
    let mut exp2 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other => {
            let exponent = other
                .strip_prefix(['e', 'E'])
                .and_then(|e| e.parse::<i32>().ok())
                .filter(|e| e.abs() <= 40)
                .ok_or_else(invalid)?;
            exp10 += exponent;
        }
    }
    let too_large = || QuantityError::TooLarge(text.to_owned());
    if mantissa == 0 {
        return Ok(0);
    }
    let mut value = mantissa
        .checked_mul(1u128.checked_shl(exp2).ok_or_else(too_large)?)
        .ok_or_else(too_large)?;
    if exp10 >= 0 {
        value = 10u128
            .checked_pow(exp10.unsigned_abs())
            .and_then(|p| value.checked_mul(p))
            .ok_or_else(too_large)?;
    } else {
        let divisor = 10u128.checked_pow(exp10.unsigned_abs());
        // Smaller than one unit but not zero: rounds up to 1.
        value = divisor.map_or(1, |d| value.div_ceil(d));
    }
    u64::try_from(value).map_err(|_| too_large())
}

/// Parses a Kubernetes duration (`metav1.Duration` text: `500ms`, `1s`, `1m30s`, `2h`).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, DurationError> {
    let invalid = || DurationError(text.to_owned());
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(invalid());
    }
    if rest == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let (number, tail) = rest.split_at(split);
        let value: f64 = number.parse().map_err(|_| invalid())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += value * seconds;
        rest = tail;
    }
    std::time::Duration::try_from_secs_f64(total).map_err(|_| invalid())
}
