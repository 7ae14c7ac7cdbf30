//! Where appends go (SPEC.md §10.1): the pure planning half of a log writer. It decides the
//! offsets of objects, WORs and WOLs and refuses any write into the live region; the engine
//! and the fixture generator do the I/O.

use crate::algorithms::recovery::LogHead;
use crate::codec::{align8, align_up};
use crate::log::{encode_object, wrap_right_payload, AreaContext, NewObject, ObjectType, WrapLeft, HEADER_LEN};

/// One write an append needs, at an offset in the area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingWrite {
    /// Offset in the log area.
    pub offset: u64,
    /// The encoded object.
    pub bytes: Vec<u8>,
    /// Its type.
    pub object_type: ObjectType,
    /// Its lsn.
    pub lsn: u64,
}

/// Why an append cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError {
    /// The object is larger than any object this area can hold.
    TooLarge {
        /// Payload bytes.
        len_payload: u64,
        /// The limit.
        len_payload_max: u64,
    },
    /// The append would overwrite the live region: trim (version log) or flush the memtable
    /// (backup log) first.
    LogFull {
        /// Offset of the first byte that would be overwritten.
        offset: u64,
    },
    /// The log's lsns are used up: an append takes up to three (WOR, WOL, object) and its
    /// successor needs one more. Only a hostile image gets here, never 2^64 appends.
    LsnExhausted {
        /// The next lsn.
        next_lsn: u64,
    },
}

impl std::fmt::Display for AppendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooLarge { len_payload, len_payload_max } => {
                write!(f, "a log object of {len_payload} bytes exceeds the area's limit of {len_payload_max}")
            }
            Self::LogFull { offset } => {
                write!(f, "the log is full: appending would overwrite live data at offset {offset}")
            }
            Self::LsnExhausted { next_lsn } => write!(f, "the log's lsns are used up (next lsn {next_lsn})"),
        }
    }
}

/// Plans appends to one log area.
#[derive(Debug, Clone)]
pub struct LogAppender {
    context: AreaContext,
    head: LogHead,
    live_start: u64,
    live_start_lsn: u64,
    /// The last object appended, `(offset, len_payload)`, while it may still grow
    /// (`extend_last`).
    last: Option<(u64, u64)>,
}

impl LogAppender {
    /// An appender continuing after `head`, with the live region starting at `live_start`
    /// (whose object has `live_start_lsn`).
    pub fn new(context: AreaContext, head: LogHead, live_start: u64, live_start_lsn: u64) -> Self {
        Self { context, head, live_start, live_start_lsn, last: None }
    }

    /// The area.
    pub fn context(&self) -> &AreaContext {
        &self.context
    }

    /// Where the next append goes.
    pub fn head(&self) -> LogHead {
        self.head
    }

    /// The first live object.
    pub fn live_start(&self) -> (u64, u64) {
        (self.live_start, self.live_start_lsn)
    }

    /// Moves the start of the live region (a durable trim, or a durable backup reset).
    pub fn set_live_start(&mut self, offset: u64, lsn: u64) {
        self.live_start = offset;
        self.live_start_lsn = lsn;
    }

    /// Sets the SN carried by following objects (after a trim).
    pub fn set_sn(&mut self, sn: u64) {
        self.head.sn = sn;
    }

    /// Where the next object will land and with which lsn, without writing (the backup start
    /// recorded by a memtable flush, SPEC.md §10.2). If the next append wraps, its WOR stands
    /// at the next sector boundary instead, where the recovery chain also looks (§9.1).
    pub fn next_position(&self) -> (u64, u64) {
        (self.head.offset, self.head.next_lsn)
    }

    fn overlaps_live(&self, start: u64, end: u64) -> bool {
        let live_end = self.head.offset;
        if self.live_start == live_end && !self.head.after_wrap_right {
            return false;
        }
        let intersects = |a: u64, b: u64| start < b && a < end;
        if self.live_start < live_end {
            intersects(self.live_start, live_end)
        } else {
            intersects(self.live_start, self.context.len_area) || intersects(0, live_end)
        }
    }

    fn encode(&self, object_type: ObjectType, sn: u64, lsn: u64, offset: u64, payload: &[u8]) -> PendingWrite {
        let object = self.object_header(object_type, sn, lsn, offset);
        PendingWrite { offset, bytes: encode_object(&object, payload), object_type, lsn }
    }

    /// The header fields of an object of this area at `offset` (a writer that grows the last
    /// object, `extend_last`, encodes its header again from them).
    pub fn object_header(&self, object_type: ObjectType, sn: u64, lsn: u64, offset: u64) -> NewObject {
        NewObject {
            object_type,
            kind: self.context.kind,
            instance: self.context.instance,
            sn,
            lsn,
            log_offset: offset,
            volume_uuid: self.context.volume_uuid,
        }
    }

    /// Plans the append of one object with `sn` and returns the writes, in order (a WOR and a
    /// WOL precede the object when the log wraps). The appender advances only on success.
    pub fn append(
        &mut self,
        object_type: ObjectType,
        sn: u64,
        payload: &[u8],
    ) -> Result<Vec<PendingWrite>, AppendError> {
        let len_payload = payload.len() as u64;
        if self.head.next_lsn > u64::MAX - 3 {
            return Err(AppendError::LsnExhausted { next_lsn: self.head.next_lsn });
        }
        if len_payload > self.context.payload_len_max() {
            return Err(AppendError::TooLarge { len_payload, len_payload_max: self.context.payload_len_max() });
        }
        let sector = u64::from(self.context.sector_size);
        let len = align8(HEADER_LEN as u64 + len_payload);
        let fits_here = align_up(self.head.offset + len, sector) + sector <= self.context.len_area;
        let mut writes = Vec::with_capacity(3);
        let mut lsn = self.head.next_lsn;
        let object_offset = if self.head.after_wrap_right || !fits_here {
            if !self.head.after_wrap_right {
                let wor_offset = align_up(self.head.offset, sector);
                if self.overlaps_live(self.head.offset, wor_offset + sector) {
                    return Err(AppendError::LogFull { offset: self.head.offset });
                }
                writes.push(self.encode(
                    ObjectType::WrapRight,
                    self.head.sn,
                    lsn,
                    wor_offset,
                    &wrap_right_payload(self.context.sector_size),
                ));
                lsn += 1;
            }
            if self.overlaps_live(0, sector + len) {
                return Err(AppendError::LogFull { offset: 0 });
            }
            let wrap = WrapLeft { ofs_first_live: self.live_start, lsn_first_live: self.live_start_lsn };
            writes.push(self.encode(
                ObjectType::WrapLeft,
                self.head.sn,
                lsn,
                0,
                &wrap.encode(self.context.sector_size),
            ));
            lsn += 1;
            sector
        } else {
            if self.overlaps_live(self.head.offset, self.head.offset + len) {
                return Err(AppendError::LogFull { offset: self.head.offset });
            }
            self.head.offset
        };
        let sn = sn.max(self.head.sn);
        writes.push(self.encode(object_type, sn, lsn, object_offset, payload));
        self.head = LogHead { offset: object_offset + len, next_lsn: lsn + 1, after_wrap_right: false, sn };
        self.last = Some((object_offset, len_payload));
        Ok(writes)
    }

    /// Grows the last object appended by `extra` payload bytes, in place: the writer has not
    /// written it out yet and rewrites its header before it does (a batch object gathering
    /// several write batches, SPEC.md §7). Refused, with nothing changed, when another object
    /// came after it, when it would pass the area's object limit, leave no room for a WOR
    /// before the area's end, or reach the live region.
    pub fn extend_last(&mut self, extra: u64) -> Result<(), AppendError> {
        let Some((offset, len_payload)) = self.last else {
            return Err(AppendError::LogFull { offset: self.head.offset });
        };
        let old_len = align8(HEADER_LEN as u64 + len_payload);
        if self.head.after_wrap_right || self.head.offset != offset + old_len {
            return Err(AppendError::LogFull { offset: self.head.offset });
        }
        let new_payload = len_payload + extra;
        if new_payload > self.context.payload_len_max() {
            return Err(AppendError::TooLarge {
                len_payload: new_payload,
                len_payload_max: self.context.payload_len_max(),
            });
        }
        let new_len = align8(HEADER_LEN as u64 + new_payload);
        let sector = u64::from(self.context.sector_size);
        if align_up(offset + new_len, sector) + sector > self.context.len_area
            || self.overlaps_live(offset + old_len, offset + new_len)
        {
            return Err(AppendError::LogFull { offset: self.head.offset });
        }
        self.head.offset = offset + new_len;
        self.last = Some((offset, new_payload));
        Ok(())
    }

    /// Bytes from the start of the live region to the head, across the wrap (what recovery
    /// reads, and what an offline switch to a rebuilt base version must keep clear of).
    pub fn live_len(&self) -> u64 {
        if self.head.offset >= self.live_start {
            self.head.offset - self.live_start
        } else {
            self.context.len_area - self.live_start + self.head.offset
        }
    }

    /// True when objects with these payload lengths can all be appended now.
    pub fn fits(&self, payload_lens: &[usize]) -> bool {
        let mut probe = self.clone();
        payload_lens.iter().all(|&len| probe.append(ObjectType::WrapRight, probe.head.sn, &vec![0; len]).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms::recovery::{chain, ChainEnd};
    use crate::geometry::LogKind;

    fn context() -> AreaContext {
        AreaContext {
            kind: LogKind::Version,
            instance: 0,
            volume_uuid: [1; 16],
            len_area: 16 * 512,
            sector_size: 512,
            ofs_area: 0,
        }
    }

    fn apply(area: &mut [u8], writes: &[PendingWrite]) {
        for write in writes {
            area[write.offset as usize..write.offset as usize + write.bytes.len()].copy_from_slice(&write.bytes);
        }
    }

    #[test]
    fn appends_wrap_with_wor_and_wol() {
        let context = context();
        let mut area = vec![0u8; context.len_area as usize];
        let head = LogHead { offset: 0, next_lsn: 1, after_wrap_right: false, sn: 1 };
        // Fill the area with objects; the live start follows the newest object, as a trim
        // would move it, so the log can wrap.
        let mut wrapped = false;
        let mut appender = LogAppender::new(context, head, 0, 1);
        for _ in 0..40 {
            let (offset, lsn) = appender.next_position();
            let writes = match appender.append(ObjectType::DeltaVersion, 1, &[0u8; 900]) {
                Ok(writes) => writes,
                Err(error) => panic!("append failed: {error}"),
            };
            wrapped |= writes.len() == 3;
            apply(&mut area, &writes);
            let last = writes.last().map(|write| (write.offset, write.lsn)).unwrap_or((offset, lsn));
            appender.set_live_start(last.0, last.1);
        }
        assert!(wrapped, "the log never wrapped");
        let left = chain(&area, &context, 0, None);
        assert!(!left.objects.is_empty());
        assert_eq!(left.objects[0].object_type, ObjectType::WrapLeft);
        assert!(matches!(left.end, ChainEnd::Invalid { .. } | ChainEnd::Stale { .. } | ChainEnd::AreaEnd));
    }

    #[test]
    fn the_last_object_grows_in_place_until_something_follows_it() {
        use crate::log::{encode_header, read_object, NewObject};
        let context = AreaContext { kind: LogKind::Backup, ..context() };
        let head = LogHead { offset: 0, next_lsn: 1, after_wrap_right: false, sn: 1 };
        let mut appender = LogAppender::new(context, head, 0, 1);
        let writes = appender.append(ObjectType::WriteBatch, 1, &[7u8; 100]).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(appender.head().offset, 168);
        appender.extend_last(60).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(appender.head().offset, 224, "64 + 160 bytes, aligned");
        // The grown object, its header encoded again, reads back whole.
        let mut area = vec![0u8; context.len_area as usize];
        let payload = [7u8; 160];
        let object = NewObject {
            object_type: ObjectType::WriteBatch,
            kind: LogKind::Backup,
            instance: 0,
            sn: 1,
            lsn: writes[0].lsn,
            log_offset: 0,
            volume_uuid: context.volume_uuid,
        };
        area[..64].copy_from_slice(&encode_header(&object, 160, crate::codec::crc32c(&payload)));
        area[64..224].copy_from_slice(&payload);
        let raw = read_object(&area, 0, &context).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(raw.payload.len(), 160);
        // Not past the object limit, nor past the area's room for a WOR.
        assert!(matches!(appender.extend_last(context.len_area), Err(AppendError::TooLarge { .. })));
        assert_eq!(appender.head().offset, 224, "a refused growth changes nothing");
        let late = LogHead { offset: 7000, next_lsn: 5, after_wrap_right: false, sn: 1 };
        let mut near_end = LogAppender::new(context, late, 0, 1);
        near_end.append(ObjectType::WriteBatch, 1, &[0u8; 100]).unwrap_or_else(|error| panic!("{error}"));
        assert!(matches!(near_end.extend_last(600), Err(AppendError::LogFull { .. })));
        near_end.extend_last(16).unwrap_or_else(|error| panic!("{error}"));
        // Once another object follows, the first one no longer grows; the new one does.
        appender.append(ObjectType::WriteBatch, 1, &[1u8; 10]).unwrap_or_else(|error| panic!("{error}"));
        let head = appender.head().offset;
        appender.extend_last(8).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(appender.head().offset, head + 8);
        // Into the live region: refused.
        let mut wrapped =
            LogAppender::new(context, LogHead { offset: 512, next_lsn: 9, after_wrap_right: false, sn: 1 }, 1024, 3);
        wrapped.append(ObjectType::WriteBatch, 1, &[0u8; 400]).unwrap_or_else(|error| panic!("{error}"));
        assert!(matches!(wrapped.extend_last(200), Err(AppendError::LogFull { .. })));
        wrapped.extend_last(40).unwrap_or_else(|error| panic!("{error}"));
    }

    #[test]
    fn refuses_to_append_when_lsns_run_out() {
        // Found by the log_object fuzz target: recovery computed lsn + 1 past u64::MAX.
        let head = LogHead { offset: 0, next_lsn: u64::MAX - 2, after_wrap_right: false, sn: 1 };
        let mut appender = LogAppender::new(context(), head, 0, 1);
        let refused = appender.append(ObjectType::DeltaVersion, 1, &[0u8; 100]);
        assert_eq!(refused, Err(AppendError::LsnExhausted { next_lsn: u64::MAX - 2 }));
        let head = LogHead { next_lsn: u64::MAX - 3, ..head };
        assert!(LogAppender::new(context(), head, 0, 1).append(ObjectType::DeltaVersion, 1, &[0u8; 100]).is_ok());
    }

    #[test]
    fn refuses_to_overwrite_the_live_region() {
        let context = context();
        let head = LogHead { offset: 0, next_lsn: 1, after_wrap_right: false, sn: 1 };
        let mut appender = LogAppender::new(context, head, 0, 1);
        let mut appended = 0;
        loop {
            match appender.append(ObjectType::DeltaVersion, 1, &[0u8; 900]) {
                Ok(_) => appended += 1,
                Err(AppendError::LogFull { .. }) => break,
                Err(error) => panic!("unexpected {error}"),
            }
            assert!(appended < 100, "never filled");
        }
        assert!(appended >= 5);
        assert!(!appender.fits(&[900]));
        let too_large = appender.append(ObjectType::DeltaVersion, 1, &vec![0u8; 16 * 512]);
        assert!(matches!(too_large, Err(AppendError::TooLarge { .. })));
    }
}
