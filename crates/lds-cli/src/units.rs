//! Sizes with units (`64MiB`, `1G`, `4096`), as mkfs tools accept them (docs/tools.md).

/// Parses a size: a number, with decimals if it comes to whole bytes, and an optional unit,
/// case-insensitive. `K`, `M`, `G`, `T`, `P` and `KiB` ... `PiB` are powers of 1024 (as
/// mke2fs reads `-b 4k`); `kB`, `MB`, `GB`, `TB`, `PB` are powers of 1000; `B` or none is
/// bytes. `1.5GiB` is 1,610,612,736; `1.1KiB` (1,126.4 bytes) is refused, not rounded.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(format!(
            "'{text}' is not a size: expected a number with an optional unit such as 64MiB, 1.5G or 2GB"
        ));
    }
    let unit_lower = unit.trim().to_ascii_lowercase();
    let multiplier: u128 = match unit_lower.as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "p" | "pib" => 1 << 50,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        "pb" => 1_000_000_000_000_000,
        _ => {
            return Err(format!(
                "'{text}': unknown unit '{}' (K, M, G, T, P or KiB.. PiB are powers of 1024; kB, MB, GB, TB, PB powers of 1000)",
                unit.trim()
            ))
        }
    };
    let too_large = || format!("'{text}' is too large (at most 16 EiB)");
    // Integers only: a decimal is its digits over a power of ten, exact or refused.
    if fraction.len() > 18 {
        return Err(format!("'{text}': too many decimals"));
    }
    let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| too_large())? };
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction_value: u128 = if fraction.is_empty() { 0 } else { fraction.parse().map_err(|_| too_large())? };
    let numerator = whole
        .checked_mul(scale)
        .and_then(|value| value.checked_add(fraction_value))
        .and_then(|value| value.checked_mul(multiplier))
        .ok_or_else(too_large)?;
    if numerator % scale != 0 {
        return Err(format!("'{text}' is not a whole number of bytes"));
    }
    u64::try_from(numerator / scale).map_err(|_| too_large())
}

/// A size for people: `4 MiB`, `1.5 GiB`, `512 B`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if (value.fract()).abs() < 1e-9 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert!(parse_size("").is_err());
        assert!(parse_size("MiB").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("99999999999T").is_err());
        // Case-insensitive, decimals when they come to whole bytes (issue 41).
        assert_eq!(parse_size("1gib"), Ok(1 << 30));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("1.5 GB"), Ok(1_500_000_000));
        assert_eq!(parse_size("2mb"), Ok(2_000_000));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size(".5k"), Ok(512));
        assert_eq!(parse_size("16EiB").map_err(|e| e.contains("unknown unit")), Err(true));
        assert_eq!(parse_size("1.1KiB").map_err(|e| e.contains("whole number of bytes")), Err(true));
        assert!(parse_size("1.2.3M").is_err());
        assert!(parse_size(".").is_err());
        assert!(parse_size("16384P").is_err(), "2^64 does not fit");
        assert_eq!(parse_size("16383P"), Ok(16383 << 50));
        assert_eq!(format_size(4 << 20), "4 MiB");
        assert_eq!(format_size(1536 << 20), "1.50 GiB");
        assert_eq!(format_size(100), "100 B");
    }
}
