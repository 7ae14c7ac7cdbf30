//! Fuzzer bytes read as parameters.

/// Reads parameters from fuzzer bytes. Every read succeeds (zeros once the bytes run out), so
/// that any input is a valid choice and afl's mutations of a parameter stay a parameter.
pub(crate) struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    pub(crate) fn u8(&mut self) -> u8 {
        match self.bytes.split_first() {
            Some((&first, rest)) => {
                self.bytes = rest;
                first
            }
            None => 0,
        }
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub(crate) fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// The bytes not read yet.
    pub(crate) fn rest(self) -> &'a [u8] {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::Input;

    #[test]
    fn reads_little_endian_then_zeros() {
        let mut input = Input::new(&[1, 2, 3, 4, 5]);
        assert_eq!(input.u16(), 0x0201);
        assert_eq!(input.u32(), 0x0005_0403);
        assert_eq!(input.u8(), 0);
        assert!(input.rest().is_empty());
    }
}
