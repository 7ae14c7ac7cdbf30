//! Standard output that remembers its first write error, so that an export cut short (a
//! full file system, `/dev/full`, a closed pipe's EPIPE when SIGPIPE is ignored) is a failed
//! command, never a success with a truncated file (docs/safety.md).

use std::io::Write;

/// A writer that counts what it wrote and keeps the first error; every write after an error
/// fails too, so that loops that stop on an error stop at once.
pub struct CheckedOutput<W: Write> {
    inner: W,
    written: u64,
    error: Option<std::io::Error>,
}

impl<W: Write> CheckedOutput<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        Self { inner, written: 0, error: None }
    }

    /// Flushes, then says whether any write failed: the error and the bytes written before it.
    pub fn finish(mut self) -> Result<u64, (std::io::Error, u64)> {
        if self.error.is_none() {
            if let Err(error) = self.inner.flush() {
                self.error = Some(error);
            }
        }
        match self.error {
            None => Ok(self.written),
            Some(error) => Err((error, self.written)),
        }
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
        match self.inner.write(bytes) {
            Ok(count) => {
                self.written += count as u64;
                Ok(count)
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => Err(error),
            Err(error) => {
                let returned = std::io::Error::new(error.kind(), error.to_string());
                self.error = Some(error);
                Err(returned)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.error.is_some() {
            return Err(self.failed());
        }
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
        let mut output = CheckedOutput::new(Full { room: 10 });
        assert!(writeln!(output, "0123456789abcdef").is_err());
        assert!(writeln!(output, "x").is_err());
        let finished = output.finish();
        assert!(matches!(&finished, Err((error, 10)) if error.raw_os_error() == Some(libc::ENOSPC)), "{finished:?}");
        let mut fine = CheckedOutput::new(Vec::new());
        assert!(writeln!(fine, "abc").is_ok());
        assert!(matches!(fine.finish(), Ok(4)));
    }
}
