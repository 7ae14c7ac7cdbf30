//! Sizes with units (`64MiB`, `1G`, `4096`), as mkfs tools accept them (docs/tools.md).

/// Parses a size: a whole number with an optional unit. `K`, `M`, `G`, `T` and `KiB` ...
/// `TiB` are powers of 1024; `kB`, `MB`, `GB`, `TB` are powers of 1000; `B` or none is bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(format!("'{text}' is not a size: expected a number with an optional unit such as 64MiB or 1G"));
    }
    let number: u64 = digits.parse().map_err(|_| format!("'{text}': the number is too large"))?;
    let multiplier: u64 = match unit.trim() {
        "" | "B" | "b" => 1,
        "K" | "k" | "KiB" | "kiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "kB" | "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => return Err(format!("'{text}': unknown unit '{other}' (use K, M, G, T, KiB.., kB..)")),
    };
    number.checked_mul(multiplier).ok_or_else(|| format!("'{text}' is too large"))
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
        assert_eq!(format_size(4 << 20), "4 MiB");
        assert_eq!(format_size(1536 << 20), "1.50 GiB");
        assert_eq!(format_size(100), "100 B");
    }
}
