//! The input of `lds load`: key/value lines, as NDJSON objects (`{"key": .., "value": ..}`,
//! or `key_hex`/`value_hex`) or `key<TAB>value`, parsed and gathered into write batches.

use std::io::BufRead;

use lds_engine::WriteBatch;
use serde_json::Value;

/// Why a key or value given as hex does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HexError {
    /// An odd number of digits.
    #[error("'{text}' is not hex: odd length")]
    OddLength {
        /// The text.
        text: String,
    },
    /// A character that is not a hex digit.
    #[error("'{text}' is not hex")]
    NotHex {
        /// The text.
        text: String,
    },
}

/// Decodes a key or value given on the command line or in a line of input: its bytes, or
/// with `is_hex` the bytes its hex digits give.
pub fn decode(text: &str, is_hex: bool) -> Result<Vec<u8>, HexError> {
    if !is_hex {
        return Ok(text.as_bytes().to_vec());
    }
    if text.len() % 2 != 0 {
        return Err(HexError::OddLength { text: text.to_string() });
    }
    (0..text.len() / 2)
        .map(|index| {
            text.get(2 * index..2 * index + 2)
                .and_then(|digits| u8::from_str_radix(digits, 16).ok())
                .ok_or_else(|| HexError::NotHex { text: text.to_string() })
        })
        .collect()
}

/// The format of the input lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadFormat {
    /// One JSON object per line: `{"key": .., "value": ..}` (or `key_hex`/`value_hex`).
    Ndjson,
    /// `key<TAB>value` per line.
    Tsv,
}

/// The format of input whose first non-blank line is `line`: NDJSON when it starts with `{`,
/// else TSV.
pub fn detect_format(line: &str) -> LoadFormat {
    if line.trim_start().starts_with('{') {
        LoadFormat::Ndjson
    } else {
        LoadFormat::Tsv
    }
}

/// Writes `bytes` as one TSV field that [`unescape_tsv`] reads back exactly: UTF-8 text as it
/// is, except `\\`, `\t`, `\n` and `\r` for a backslash, tab, newline and carriage return,
/// and `\xHH` for every other control character and every byte that is not UTF-8 (the
/// escapes of PostgreSQL's COPY text format).
pub fn escape_tsv(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for character in chunk.valid().chars() {
            match character {
                '\\' => text.push_str("\\\\"),
                '\t' => text.push_str("\\t"),
                '\n' => text.push_str("\\n"),
                '\r' => text.push_str("\\r"),
                control if control.is_ascii_control() => text.push_str(&format!("\\x{:02x}", u32::from(control))),
                other => text.push(other),
            }
        }
        for byte in chunk.invalid() {
            text.push_str(&format!("\\x{byte:02x}"));
        }
    }
    text
}

/// Reads a TSV field [`escape_tsv`] wrote: its bytes, or where an escape is not one of
/// `\\`, `\t`, `\n`, `\r`, `\xHH`, the error naming it and its place.
pub fn unescape_tsv(text: &str) -> Result<Vec<u8>, LineError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'\\' {
            out.push(bytes[at]);
            at += 1;
            continue;
        }
        let escape = match bytes.get(at + 1) {
            Some(b'\\') => b'\\',
            Some(b't') => b'\t',
            Some(b'n') => b'\n',
            Some(b'r') => b'\r',
            Some(b'x') => {
                let byte = text
                    .get(at + 2..at + 4)
                    .filter(|digits| digits.bytes().all(|digit| digit.is_ascii_hexdigit()))
                    .and_then(|digits| u8::from_str_radix(digits, 16).ok());
                let Some(byte) = byte else {
                    return Err(LineError::Escape { column: at + 1, found: escape_found(text, at) });
                };
                out.push(byte);
                at += 4;
                continue;
            }
            _ => return Err(LineError::Escape { column: at + 1, found: escape_found(text, at) }),
        };
        out.push(escape);
        at += 2;
    }
    Ok(out)
}

/// The text of a bad escape at byte `at` (at most 4 characters), for the message.
fn escape_found(text: &str, at: usize) -> String {
    text[at..].chars().take(4).collect()
}

/// Why a line of input is not a key and a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// A TSV line without a tab.
    #[error("no tab between key and value")]
    NoTab,
    /// A key or value given as hex does not decode.
    #[error("{0}")]
    Hex(#[from] HexError),
    /// A TSV field holds a backslash that starts no escape `escape_tsv` writes.
    #[error("column {column}: '{found}' is not an escape (\\\\, \\t, \\n, \\r or \\xHH; a backslash is written \\\\)")]
    Escape {
        /// Where the backslash is, from 1, in bytes of the field.
        column: usize,
        /// The text from the backslash on.
        found: String,
    },
    /// An NDJSON line that is not JSON.
    #[error("not JSON: {0}")]
    NotJson(serde_json::Error),
    /// An NDJSON object without the key or the value.
    #[error("no string \"{name}\" or \"{name}_hex\"")]
    NoField {
        /// `key` or `value`.
        name: &'static str,
    },
}

/// The key and value of one line of input (`is_hex`: keys and values are hex in TSV).
pub fn parse_line(line: &str, format: LoadFormat, is_hex: bool) -> Result<(Vec<u8>, Vec<u8>), LineError> {
    match format {
        LoadFormat::Tsv => {
            let (key, value) = line.split_once('\t').ok_or(LineError::NoTab)?;
            if is_hex {
                return Ok((decode(key, true)?, decode(value, true)?));
            }
            Ok((unescape_tsv(key)?, unescape_tsv(value)?))
        }
        LoadFormat::Ndjson => {
            let object: Value = serde_json::from_str(line).map_err(LineError::NotJson)?;
            let field = |name: &'static str| -> Result<Vec<u8>, LineError> {
                if let Some(text) = object.get(name).and_then(Value::as_str) {
                    return Ok(text.as_bytes().to_vec());
                }
                if let Some(text) = object.get(format!("{name}_hex")).and_then(Value::as_str) {
                    return Ok(decode(text, true)?);
                }
                Err(LineError::NoField { name })
            };
            Ok((field("key")?, field("value")?))
        }
    }
}

/// Why the input could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The input could not be read.
    #[error("{0}")]
    Read(std::io::Error),
    /// A line is not a key and a value.
    #[error("line {number}: {source}")]
    Line {
        /// Its number, from 1.
        number: u64,
        /// Why.
        source: LineError,
    },
}

/// The input, line by line, gathered into write batches of at most `entries_max` entries
/// and about `bytes_max` bytes: each `next` gives a full batch, and `rest` the last one
/// (possibly empty) once the input ends. Blank lines are skipped; without a format, the first
/// non-blank line decides it (`detect_format`). Stops at the first line that is not a key and
/// a value, naming it.
pub struct Batches<'a> {
    input: &'a mut dyn BufRead,
    format: Option<LoadFormat>,
    is_hex: bool,
    entries_max: usize,
    bytes_max: u64,
    batch: WriteBatch,
    number: u64,
    ended: bool,
}

impl<'a> Batches<'a> {
    /// Batches of `input`'s lines.
    pub fn new(
        input: &'a mut dyn BufRead,
        format: Option<LoadFormat>,
        is_hex: bool,
        entries_max: usize,
        bytes_max: u64,
    ) -> Self {
        Self { input, format, is_hex, entries_max, bytes_max, batch: WriteBatch::new(), number: 0, ended: false }
    }

    /// The last batch, once `next` has given `None`: what is left (possibly nothing).
    pub fn rest(self) -> WriteBatch {
        self.batch
    }
}

impl Iterator for Batches<'_> {
    type Item = Result<WriteBatch, LoadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut line = String::new();
        // Each pass reads one line; the input is finite, and a read of 0 bytes ends it.
        while !self.ended {
            line.clear();
            match self.input.read_line(&mut line) {
                Ok(0) => self.ended = true,
                Ok(_) => {}
                Err(error) => {
                    self.ended = true;
                    return Some(Err(LoadError::Read(error)));
                }
            }
            if self.ended {
                break;
            }
            self.number += 1;
            let text = line.trim_end_matches(['\n', '\r']);
            // A blank line is skipped; a line holding a tab is a TSV pair even when key and
            // value are spaces only.
            if text.trim().is_empty() && !text.contains('\t') {
                continue;
            }
            let format = *self.format.get_or_insert_with(|| detect_format(text));
            let (key, value) = match parse_line(text, format, self.is_hex) {
                Ok(pair) => pair,
                Err(source) => {
                    self.ended = true;
                    return Some(Err(LoadError::Line { number: self.number, source }));
                }
            };
            self.batch.put(&key, &value);
            if self.batch.len() >= self.entries_max || self.batch.encoded_len() as u64 >= self.bytes_max {
                return Some(Ok(std::mem::take(&mut self.batch)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_value_round_trips_through_a_tsv_field() {
        let every: Vec<u8> = (0..=255u8).collect();
        let field = escape_tsv(&every);
        assert!(!field.contains('\t') && !field.contains('\n') && !field.contains('\r'), "{field}");
        assert_eq!(unescape_tsv(&field).ok(), Some(every));
        for text in ["plain", "tab\there", "back\\slash", "é and ü", "", "\u{7f}\u{0}", "\\x41"] {
            assert_eq!(unescape_tsv(&escape_tsv(text.as_bytes())).ok(), Some(text.as_bytes().to_vec()), "{text:?}");
        }
        assert_eq!(escape_tsv(b"a\tb\\c\xff"), "a\\tb\\\\c\\xff");
    }

    #[test]
    fn a_bad_escape_is_named_with_its_column() {
        for (text, column) in [("ab\\q", 3), ("\\x4", 1), ("x\\x+f", 2), ("end\\", 4), ("\\xzz", 1)] {
            match unescape_tsv(text) {
                Err(LineError::Escape { column: found, .. }) => assert_eq!(found, column, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let line = parse_line("k\\q\tv", LoadFormat::Tsv, false).map_err(|error| error.to_string());
        assert!(matches!(&line, Err(message) if message.contains("column 2") && message.contains("\\q")), "{line:?}");
    }

    #[test]
    fn hex_decodes_or_names_the_text() {
        assert_eq!(decode("00ff", true), Ok(vec![0, 255]));
        assert_eq!(decode("abc", false), Ok(b"abc".to_vec()));
        assert_eq!(decode("abc", true), Err(HexError::OddLength { text: "abc".into() }));
        assert_eq!(decode("zz", true).map_err(|error| error.to_string()), Err("'zz' is not hex".to_string()));
        // Two bytes that split a multi-byte character are no hex digits (and no panic).
        assert!(matches!(decode("aé0", true), Err(HexError::NotHex { .. })));
    }

    #[test]
    fn lines_batch_by_count_and_the_first_bad_line_is_named() {
        let input = "{\"key\": \"a\", \"value\": \"1\"}\n\n{\"key_hex\": \"62\", \"value\": \"2\"}\n{\"key\": \"c\", \"value\": \"3\"}\n";
        let mut reader = input.as_bytes();
        let mut batches = Batches::new(&mut reader, None, false, 2, u64::MAX);
        let first = batches.next();
        assert!(
            matches!(&first, Some(Ok(batch)) if batch.len() == 2),
            "{:?}",
            first.map(|batch| batch.map(|b| b.len()))
        );
        assert!(batches.next().is_none());
        assert_eq!(batches.rest().len(), 1);
        let mut reader = "a\t1\nno tab\n".as_bytes();
        let mut batches = Batches::new(&mut reader, None, false, 1000, u64::MAX);
        let refused = batches.next();
        assert!(matches!(refused, Some(Err(LoadError::Line { number: 2, source: LineError::NoTab }))));
        let mut reader = "{\"key\": \"a\"}\n".as_bytes();
        let refused = Batches::new(&mut reader, Some(LoadFormat::Ndjson), false, 1000, u64::MAX).next();
        let message = refused.and_then(Result::err).map(|error| error.to_string());
        assert_eq!(message.as_deref(), Some("line 1: no string \"value\" or \"value_hex\""));
    }
}
