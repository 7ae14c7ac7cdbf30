//! A JSON document written as it is made: the same bytes as `serde_json::to_string_pretty` of
//! the whole document, without holding it. Dump lists every object of a log area, and a
//! version log may hold hundreds of thousands: as one `serde_json::Value` the document took
//! gigabytes (about 10 KB an object). The writer keeps only the nesting; each leaf value (one
//! log object, one slot) is a `Value` printed when it is given.
//!
//! The layout is serde_json's `PrettyFormatter`: two spaces a level, `"key": value`, a comma
//! and a new line between elements, `[]` and `{}` for empty containers.

use std::io::Write;

use serde_json::{Map, Value};

/// Bytes of indentation a nesting level.
const INDENT: &[u8] = b"  ";

/// Writes one pretty-printed JSON document to `out`, piece by piece.
pub struct JsonStream<'a> {
    out: &'a mut dyn Write,
    /// For each open container, whether it has an element yet.
    open: Vec<bool>,
}

impl<'a> JsonStream<'a> {
    /// A document written to `out`.
    pub fn new(out: &'a mut dyn Write) -> Self {
        Self { out, open: Vec::new() }
    }

    fn indent(&mut self, depth: usize) -> std::io::Result<()> {
        for _ in 0..depth {
            self.out.write_all(INDENT)?;
        }
        Ok(())
    }

    /// The separator before an element of the innermost container, and its key.
    fn element(&mut self, key: Option<&str>) -> std::io::Result<()> {
        if let Some(has_element) = self.open.last_mut() {
            let separator: &[u8] = if *has_element { b",\n" } else { b"\n" };
            *has_element = true;
            self.out.write_all(separator)?;
            self.indent(self.open.len())?;
        }
        if let Some(key) = key {
            serde_json::to_writer(&mut *self.out, key)?;
            self.out.write_all(b": ")?;
        }
        Ok(())
    }

    fn begin(&mut self, key: Option<&str>, bracket: &[u8]) -> std::io::Result<()> {
        self.element(key)?;
        self.out.write_all(bracket)?;
        self.open.push(false);
        Ok(())
    }

    fn end(&mut self, bracket: &[u8]) -> std::io::Result<()> {
        if self.open.pop().unwrap_or(false) {
            self.out.write_all(b"\n")?;
            self.indent(self.open.len())?;
        }
        self.out.write_all(bracket)
    }

    /// Opens an object: the document (no key), an element of an array (no key) or a member
    /// of an object (its key).
    pub fn begin_object(&mut self, key: Option<&str>) -> std::io::Result<()> {
        self.begin(key, b"{")
    }

    /// Closes the innermost object.
    pub fn end_object(&mut self) -> std::io::Result<()> {
        self.end(b"}")
    }

    /// Opens an array, as [`JsonStream::begin_object`] an object.
    pub fn begin_array(&mut self, key: Option<&str>) -> std::io::Result<()> {
        self.begin(key, b"[")
    }

    /// Closes the innermost array.
    pub fn end_array(&mut self) -> std::io::Result<()> {
        self.end(b"]")
    }

    /// Writes a whole value as an element of the innermost container.
    pub fn value(&mut self, key: Option<&str>, value: &Value) -> std::io::Result<()> {
        self.element(key)?;
        let text = serde_json::to_string_pretty(value)?;
        // A JSON text has no new line inside a string (it is escaped), so each new line
        // starts a line of the value, indented to where the value stands.
        let mut lines = text.split('\n');
        if let Some(first) = lines.next() {
            self.out.write_all(first.as_bytes())?;
        }
        for line in lines {
            self.out.write_all(b"\n")?;
            self.indent(self.open.len())?;
            self.out.write_all(line.as_bytes())?;
        }
        Ok(())
    }

    /// Writes every member of `map` into the innermost object, in order.
    pub fn members(&mut self, map: &Map<String, Value>) -> std::io::Result<()> {
        for (key, value) in map {
            self.value(Some(key), value)?;
        }
        Ok(())
    }

    /// Ends the document with a new line (as `writeln!` of the whole text did).
    pub fn finish(self) -> std::io::Result<()> {
        self.out.write_all(b"\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The document written piece by piece, and `to_string_pretty` of it whole.
    fn both(document: &Value) -> (String, String) {
        let mut out = Vec::new();
        let mut stream = JsonStream::new(&mut out);
        write_value(&mut stream, None, document).unwrap_or_else(|error| panic!("{error}"));
        stream.finish().unwrap_or_else(|error| panic!("{error}"));
        let whole = serde_json::to_string_pretty(document).unwrap_or_else(|error| panic!("{error}")) + "\n";
        (String::from_utf8_lossy(&out).into_owned(), whole)
    }

    /// Writes `value` with the containers opened and closed by the stream (every level), so
    /// that each way of writing is compared with serde_json.
    fn write_value(stream: &mut JsonStream<'_>, key: Option<&str>, value: &Value) -> std::io::Result<()> {
        match value {
            Value::Object(map) => {
                stream.begin_object(key)?;
                for (key, value) in map {
                    write_value(stream, Some(key), value)?;
                }
                stream.end_object()
            }
            Value::Array(values) => {
                stream.begin_array(key)?;
                for value in values {
                    write_value(stream, None, value)?;
                }
                stream.end_array()
            }
            other => stream.value(key, other),
        }
    }

    #[test]
    fn pieces_give_the_bytes_of_the_whole_document() {
        let documents = [
            json!({}),
            json!([]),
            json!({"a": [], "b": {}, "c": [{}], "d": [[]], "e": null}),
            json!({"schema": "lds-dump/1", "objects": [{"x": 1, "y": "two\nlines \"quoted\"", "z": [1, 2, {"w": true}]}, {"x": 2}], "slots": []}),
            json!([1, "a", [2, [3, {"k\u{1}": -4.5}]]]),
        ];
        for document in &documents {
            let (streamed, whole) = both(document);
            assert_eq!(streamed, whole, "{document}");
        }
    }

    #[test]
    fn a_leaf_value_is_indented_where_it_stands() {
        let mut out = Vec::new();
        let mut stream = JsonStream::new(&mut out);
        let nested = json!({"a": {"b": [1, {"c": 2}]}, "d": []});
        stream.begin_object(None).unwrap_or_else(|error| panic!("{error}"));
        stream.begin_array(Some("list")).unwrap_or_else(|error| panic!("{error}"));
        stream.value(None, &nested).unwrap_or_else(|error| panic!("{error}"));
        stream.value(None, &json!("last")).unwrap_or_else(|error| panic!("{error}"));
        stream.end_array().unwrap_or_else(|error| panic!("{error}"));
        stream.end_object().unwrap_or_else(|error| panic!("{error}"));
        stream.finish().unwrap_or_else(|error| panic!("{error}"));
        let whole = json!({"list": [nested, "last"]});
        let expected = serde_json::to_string_pretty(&whole).unwrap_or_else(|error| panic!("{error}")) + "\n";
        assert_eq!(String::from_utf8_lossy(&out), expected);
    }
}
