//! Switching an instance to a rebuilt version in one atomic step (SPEC.md §9.2 steps 1 to 4):
//! the new base version and a WOR after it are written where the old state does not read
//! (outside the live chain), then a WOL at offset 0 that points at them. The WOL is one
//! sector, so it lands whole or not at all (§2): before, recovery finds the old chain; after,
//! the chain `BV, WOR, WOL`. The three objects carry lsns and an SN above any in the area, so
//! that nothing left in the area continues their chain, and the head after the WOL leaves the
//! rest of the area to the next appends.

use lds_format::codec::{align8, align_up};
use lds_format::log::{encode_object, wrap_right_payload, AreaContext, NewObject, ObjectType, WrapLeft, HEADER_LEN};
use lds_format::version::payload::BaseVersion;

/// The writes of a switch, as area offsets.
pub(crate) struct Flip {
    base: (u64, Vec<u8>),
    wrap_right: (u64, Vec<u8>),
    wrap_left: Vec<u8>,
}

impl Flip {
    /// The writes in order: the base version, the WOR, then (last, alone) the WOL at 0.
    pub(crate) fn writes(&self) -> impl Iterator<Item = (u64, &[u8], &'static str)> {
        [
            (self.base.0, self.base.1.as_slice(), "rebuilt base version"),
            (self.wrap_right.0, self.wrap_right.1.as_slice(), "WOR after it"),
            (0, self.wrap_left.as_slice(), "WOL switching to it"),
        ]
        .into_iter()
    }
}

/// Plans the switch to `base` with lsns from `lsn` and SN `sn`, keeping clear of the
/// `protected` area ranges (the old state's objects). Fails with the object's length when no
/// place leaves the next appends room for a base version of their own.
pub(crate) fn plan(
    context: &AreaContext,
    base: &BaseVersion,
    lsn: u64,
    sn: u64,
    protected: &[(u64, u64)],
) -> Result<Flip, u64> {
    let payload = base.encode();
    let sector = u64::from(context.sector_size);
    let len = align8(HEADER_LEN as u64 + payload.len() as u64);
    if payload.len() as u64 > context.payload_len_max() || len + 2 * sector > context.len_area {
        return Err(len);
    }
    let clear =
        |start: u64, end: u64| protected.iter().all(|&(offset, length)| end <= offset || offset + length <= start);
    // The highest place (the most room ahead of the head, which is one sector in) whose base
    // version and WOR are clear of the old state.
    let highest = (context.len_area - sector - len) / sector * sector;
    let place = (1..=highest / sector).rev().map(|index| index * sector).find(|&offset| {
        let wor = align_up(offset + len, sector);
        wor + sector <= context.len_area && clear(offset, wor + sector)
    });
    // The next appends start one sector in and must fit a trim (a base version, a WOR and a
    // WOL) before the new base version.
    let Some(offset) = place.filter(|&offset| offset >= sector + len + 3 * sector) else { return Err(len) };
    let object = |object_type, lsn, log_offset| NewObject {
        object_type,
        kind: context.kind,
        instance: context.instance,
        sn,
        lsn,
        log_offset,
        volume_uuid: context.volume_uuid,
    };
    let wor = align_up(offset + len, sector);
    Ok(Flip {
        base: (offset, encode_object(&object(ObjectType::BaseVersion, lsn, offset), &payload)),
        wrap_right: (
            wor,
            encode_object(&object(ObjectType::WrapRight, lsn + 1, wor), &wrap_right_payload(context.sector_size)),
        ),
        wrap_left: encode_object(
            &object(ObjectType::WrapLeft, lsn + 2, 0),
            &WrapLeft { ofs_first_live: offset, lsn_first_live: lsn }.encode(context.sector_size),
        ),
    })
}
