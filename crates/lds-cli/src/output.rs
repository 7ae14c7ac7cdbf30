//! Standard output that remembers its first write error, so that an export cut short (a
//! full file system, `/dev/full`, a closed pipe's EPIPE when SIGPIPE is ignored) is a failed
//! command, never a success with a truncated file (docs/safety.md).

use std::io::Write;

/// Bytes gathered before they are written to the inner writer (a line at a time on a
/// terminal).
const BUFFER_LEN: usize = 64 << 10;

/// Consecutive interrupted writes retried before the error is kept (a bound on the loop).
const INTERRUPTED_MAX: usize = 1000;

/// A buffered writer that counts the bytes its inner writer took (not those it buffered) and
/// keeps the first error; every write after an error fails too, so that loops that stop on
/// an error stop at once. It does its own buffering over an unbuffered inner writer (main
/// gives it the standard output's descriptor): a buffer below it would take bytes it later
/// fails to write, and the count would say they got out.
pub struct CheckedOutput<W: Write> {
    inner: W,
    buffer: Vec<u8>,
    /// Write each complete line at once (standard output is a terminal).
    line_buffered: bool,
    written: u64,
    error: Option<std::io::Error>,
}

impl<W: Write> CheckedOutput<W> {
    /// Wraps `inner`, which should not buffer: the count is of what `inner` took.
    pub fn new(inner: W) -> Self {
        Self { inner, buffer: Vec::with_capacity(BUFFER_LEN), line_buffered: false, written: 0, error: None }
    }

    /// As `new`, writing each complete line at once (for a terminal).
    pub fn line_buffered(inner: W) -> Self {
        Self { line_buffered: true, ..Self::new(inner) }
    }

    /// Flushes, then says whether any write failed: the error and the bytes written before it.
    pub fn finish(mut self) -> Result<u64, (std::io::Error, u64)> {
        if self.error.is_none() {
            if let Err(error) = self.drain().and_then(|()| self.inner.flush()) {
                self.error.get_or_insert(error);
            }
        }
        match self.error {
            None => Ok(self.written),
            Some(error) => Err((error, self.written)),
        }
    }

    /// Writes the buffer to the inner writer, counting what it takes; keeps the first error.
    fn drain(&mut self) -> std::io::Result<()> {
        let mut done = 0;
        let mut interrupted = 0;
        // Bounded: every turn writes at least a byte, fails, or counts an interruption.
        let result = loop {
            if done == self.buffer.len() {
                break Ok(());
            }
            match self.inner.write(&self.buffer[done..]) {
                Ok(0) => break Err(std::io::Error::from(std::io::ErrorKind::WriteZero)),
                Ok(count) => {
                    done += count;
                    self.written += count as u64;
                    interrupted = 0;
                }
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted && interrupted < INTERRUPTED_MAX => {
                    interrupted += 1;
                }
                Err(error) => break Err(error),
            }
        };
        self.buffer.drain(..done);
        result.map_err(|error| {
            let returned = std::io::Error::new(error.kind(), error.to_string());
            self.error = Some(error);
            returned
        })
    }

    fn failed(&self) -> std::io::Error {
        match &self.error {
            Some(error) => std::io::Error::new(error.kind(), format!("an earlier write failed: {error}")),
            None => std::io::Error::other("an earlier write failed"),
        }
    }
}

impl<W: Write> Write for CheckedOutput<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if self.error.is_some() {
            return Err(self.failed());
        }
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= BUFFER_LEN || (self.line_buffered && bytes.contains(&b'\n')) {
            self.drain()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.error.is_some() {
            return Err(self.failed());
        }
        self.drain()?;
        self.inner.flush().inspect_err(|error| self.error = Some(std::io::Error::new(error.kind(), error.to_string())))
    }
}

/// The exit code and message for a command whose standard output failed: 8 (operational
/// error), whatever the command itself returned, since its output is incomplete.
pub fn output_failed(command: &str, error: &std::io::Error, written: u64) -> (i32, String) {
    (
        crate::session::EXIT_OPERATIONAL,
        format!(
            "lds {command}: writing standard output failed after {written} bytes: {error}; the output is incomplete"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepts `room` bytes, then fails as a full device does.
    struct Full {
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let count = bytes.len().min(self.room);
            self.room -= count;
            Ok(count)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_first_error_is_kept_and_later_writes_fail() {
        let mut output = CheckedOutput::line_buffered(Full { room: 10 });
        assert!(writeln!(output, "0123456789abcdef").is_err());
        assert!(writeln!(output, "x").is_err());
        let finished = output.finish();
        assert!(matches!(&finished, Err((error, 10)) if error.raw_os_error() == Some(libc::ENOSPC)), "{finished:?}");
        let mut fine = CheckedOutput::new(Vec::new());
        assert!(writeln!(fine, "abc").is_ok());
        assert!(matches!(fine.finish(), Ok(4)));
    }

    /// The count is of bytes the inner writer took: bytes still buffered when it fails are
    /// not counted, however the writes were split (a line written in pieces, as `writeln!`
    /// does).
    #[test]
    fn the_count_is_of_bytes_written_not_buffered() {
        let mut output = CheckedOutput::new(Full { room: 1000 });
        let mut offered = 0;
        // Bounded: the buffer fills after BUFFER_LEN bytes, and the inner writer fails then.
        while offered < 4 * BUFFER_LEN && write!(output, "key{offered:06}").is_ok() && writeln!(output).is_ok() {
            offered += 10;
        }
        assert!(offered >= BUFFER_LEN - 10, "a write failed before the buffer was full: {offered}");
        let finished = output.finish();
        assert!(matches!(&finished, Err((_, 1000))), "{finished:?}");
        // Short of a full buffer nothing reaches the inner writer until finish.
        let mut output = CheckedOutput::new(Full { room: 5 });
        assert!(write!(output, "0123456789").is_ok());
        assert!(matches!(output.finish(), Err((_, 5))));
    }
}
