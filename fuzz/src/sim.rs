//! The `sim` target (docs/reliability.md L3): the input chooses a short workload, an optional EIO
//! on one write or flush (F7), a crash point in the device's history, the unflushed writes
//! that reach the media (F2) and one torn write (F3). The crash image is recovered with the
//! real engine and checked against I1, I2, I3 and I5 by the enumerator's own oracle; after an
//! EIO the store must refuse writes and never show a wrong state (I7); optionally a synced
//! write after recovery must survive a second crash with the recovered state intact (I1, I4).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use lds_engine::{Db, Error, WriteOptions};
use lds_format::geometry::SECTOR_SIZE_MIN;
use lds_sim::enumerate::check_crash_image;
use lds_sim::sim_device::{apply, sectors_touched, Event, Fault, SimDevice};
use lds_sim::workload::{apply_op, apply_to_model, formatted_image, layout, options, Model, Op, OpSpan, Run, Workload};

use crate::input::Input;

/// Most operations a sim input chooses.
pub(crate) const OPS_MAX: usize = 64;
/// Keys are `key-00` to `key-31`: few enough that operations meet.
const KEYS_COUNT: u8 = 32;
/// Entries of a batch: 1 to this many.
const BATCH_ENTRIES_MAX: u8 = 4;

/// How the input's bytes encode the run; `encode` is the inverse of `Input`'s reads in `sim`.
#[derive(Debug, Clone, Default)]
pub(crate) struct SimInput {
    /// Bit 0: unbuffered log writes; bits 1-2: 1 an EIO on write `fault_index`, 2 on flush
    /// `fault_index`, 3 no fault and the second set of techniques; bit 3: a synced write after
    /// recovery, then a second crash; bits 4 to 7: engine techniques on, bit `4 + i` for
    /// `lds_engine::TECHNIQUES[i]` (the first set), or `TECHNIQUES[4 + i]` (the second:
    /// size-tiered, forest, triad-log; size-tiered alone when both of the first two bits are
    /// set, triad-log only without them).
    pub(crate) flags: u8,
    /// Operation codes and their arguments (see `read_op`).
    pub(crate) ops: Vec<Vec<u8>>,
    pub(crate) fault_index: u16,
    pub(crate) crash_point: u16,
    pub(crate) subset_mask: u64,
    /// 0: no torn write; otherwise one of the unflushed writes, by position, tears.
    pub(crate) tear: u8,
    pub(crate) torn_sectors: u8,
    pub(crate) written_len: u8,
}

impl SimInput {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut bytes = vec![self.flags, self.ops.len() as u8];
        for op in &self.ops {
            bytes.extend_from_slice(op);
        }
        bytes.extend_from_slice(&self.fault_index.to_le_bytes());
        bytes.extend_from_slice(&self.crash_point.to_le_bytes());
        bytes.extend_from_slice(&self.subset_mask.to_le_bytes());
        bytes.extend_from_slice(&[self.tear, self.torn_sectors, self.written_len]);
        bytes
    }
}

fn key(input: &mut Input<'_>) -> Vec<u8> {
    format!("key-{:02}", input.u8() % KEYS_COUNT).into_bytes()
}

/// One operation: a code (kind in bits 0-2, sync in bit 3, and for a put bit 7: the value
/// length counts 12-byte units, up to 3,060 bytes (a batch stays under the simulator's limit,
/// half its backup log's largest object), so that merges write several outputs and
/// journal, SPEC.md §12), then its arguments: put `key, value length, fill`; delete `key`;
/// batch `count`, then `key, value length` each (length 0 deletes); flush, compact and reopen
/// none.
fn read_op(input: &mut Input<'_>) -> Op {
    let code = input.u8();
    let sync = code & 8 != 0;
    match code % 8 {
        0..=2 => {
            let key = key(input);
            let len = usize::from(input.u8()) * if code & 0x80 != 0 { 12 } else { 1 };
            let fill = b'a' + input.u8() % 26;
            Op::Put { key, value: vec![fill; len], sync }
        }
        3 => Op::Delete { key: key(input), sync },
        4 => {
            let count = 1 + input.u8() % BATCH_ENTRIES_MAX;
            let entries = (0..count)
                .map(|_| {
                    let key = key(input);
                    let len = usize::from(input.u8());
                    let value = (len > 0).then(|| vec![key[key.len() - 1]; len]);
                    (key, value)
                })
                .collect();
            Op::Batch { entries, sync }
        }
        5 => Op::Flush,
        6 => Op::Compact,
        _ => Op::Reopen,
    }
}

fn sector_size() -> u64 {
    u64::from(layout().sector_size.unwrap_or(SECTOR_SIZE_MIN))
}

/// A formatted volume, made once for each set of features the techniques switched on want:
/// `value_chunks` (what `kv-separation` needs), `chunk_sketches` (`triad-disk`), `log_tables`
/// (`triad-log`, with the simulator's larger backup log for it).
fn fresh_image() -> &'static [u8] {
    static IMAGES: [OnceLock<Vec<u8>>; 8] = [const { OnceLock::new() }; 8];
    let options = options(false);
    let index = usize::from(options.value_separation_min.is_some())
        + 2 * usize::from(options.level0_overlap_min.is_some())
        + 4 * usize::from(options.log_tables);
    IMAGES[index]
        .get_or_init(|| formatted_image().unwrap_or_else(|error| panic!("sim: cannot format the volume: {error}")))
}

fn open(device: &SimDevice, unbuffered: bool) -> Result<Db, Error> {
    Db::open_device(Arc::new(device.clone()), Path::new("fuzzed run"), options(unbuffered)).map(|(db, _)| db)
}

/// Runs the operations until one fails; the run's models include the failed operation's
/// effect (it may have reached the media) but its span never ends (it was not acknowledged).
fn drive(ops: &[Op], unbuffered: bool, fault: Option<Fault>) -> Option<Run> {
    let device = SimDevice::new(fresh_image().to_vec());
    if let Some(fault) = fault {
        device.inject(fault);
    }
    let mut db = match open(&device, unbuffered) {
        Ok(db) => Some(db),
        Err(error) => {
            assert!(fault.is_some(), "sim: a fresh volume does not open: {error}");
            return None;
        }
    };
    let mut model = Model::new();
    let mut models = vec![model.clone()];
    let mut spans = Vec::new();
    let mut executed = Vec::new();
    for (number, op) in ops.iter().enumerate() {
        let start_event = device.event_count();
        // A failed operation leaves the store open (to check I7 on it), except a failed reopen.
        let result = match (op, db.take()) {
            (Op::Reopen, Some(current)) => current.close().and_then(|()| open(&device, unbuffered)).map(|next| {
                db = Some(next);
            }),
            (_, Some(current)) => {
                let result = apply_op(&current, op);
                db = Some(current);
                result
            }
            (_, None) => break,
        };
        apply_to_model(&mut model, op);
        models.push(model.clone());
        executed.push(op.clone());
        match result {
            Ok(()) => spans.push(OpSpan { start_event, end_event: device.event_count() }),
            Err(error) => {
                assert!(
                    fault.is_some(),
                    "sim: operation {number} ({}) fails without an injected fault: {error}",
                    op.describe()
                );
                spans.push(OpSpan { start_event, end_event: usize::MAX });
                break;
            }
        }
    }
    let failed = spans.last().is_some_and(|span| span.end_event == usize::MAX);
    if let (Some(fault), true) = (fault, failed) {
        check_poisoned(db.as_ref(), fault, &models);
    }
    if let Some(db) = db {
        let closed = db.close();
        assert!(fault.is_some() || closed.is_ok(), "sim: closing fails without an injected fault: {closed:?}");
    }
    let workload = Workload { name: "fuzzed".into(), ops: executed };
    Some(Run { workload, history: device.history(), spans, models, sector_size: sector_size() })
}

/// I7 after an EIO: later writes are refused; reads show the state before the failed
/// operation or after it, or an error.
fn check_poisoned(db: Option<&Db>, fault: Fault, models: &[Model]) {
    let (Some(db), [.., before, after]) = (db, models) else {
        return;
    };
    let refused = db.put(b"after-the-fault", b"x", WriteOptions { sync: true });
    assert!(
        matches!(refused, Err(Error::Poisoned { .. })),
        "sim: {fault:?}: a write after the failure was accepted: {refused:?}"
    );
    if let Ok(Ok(state)) = db.iter().map(Iterator::collect::<Result<Model, _>>) {
        assert!(&state == before || &state == after, "sim: {fault:?}: reads after the failure show a wrong state");
    }
}

/// The durable image after `crash_point` events, plus the unflushed writes `subset_mask`
/// selects (by position, as the enumerator counts them) and one torn write.
fn crash_image(run: &Run, input: &SimInput) -> (usize, Vec<u8>) {
    let history = &run.history;
    let point = usize::from(input.crash_point) % (history.events.len() + 1);
    let mut image = history.initial.as_ref().clone();
    let mut pending: Vec<usize> = Vec::new();
    for event in &history.events[..point] {
        match event {
            Event::Write(index) => pending.push(*index),
            Event::Flush(made) => {
                for &index in &pending {
                    if made.contains(&index) {
                        apply(&mut image, &history.writes[index], run.sector_size, None);
                    }
                }
                pending.retain(|index| !made.contains(index));
            }
        }
    }
    let torn = (input.tear > 0 && !pending.is_empty()).then(|| usize::from(input.tear - 1) % pending.len());
    for (position, &index) in pending.iter().enumerate() {
        let write = &history.writes[index];
        if Some(position) == torn {
            let sectors = sectors_touched(write, run.sector_size);
            if sectors > 1 {
                let landed = 1 + u64::from(input.torn_sectors) % (sectors - 1);
                apply(&mut image, write, run.sector_size, Some(landed));
            }
        } else if position < 64 && input.subset_mask & (1 << position) != 0 {
            apply(&mut image, write, run.sector_size, None);
        }
    }
    (point, image)
}

fn recovered(image: Vec<u8>, unbuffered: bool, what: &str) -> (SimDevice, Db, Model) {
    let device = SimDevice::new(image);
    let db = open(&device, unbuffered).unwrap_or_else(|error| panic!("sim: {what}: recovery fails: {error}"));
    let state =
        db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("sim: {what}: reading fails: {error}"));
    (device, db, state)
}

/// I1 and I4 across a second crash: after recovery, a synced write, then a crash losing
/// every unflushed write: the recovered state is the first one plus that write.
fn write_after_recovery(image: &[u8], unbuffered: bool, written_len: u8) {
    let (device, db, state) = recovered(image.to_vec(), unbuffered, "the crash image");
    let value = vec![b'w'; usize::from(written_len) + 1];
    db.put(b"written-after-recovery", &value, WriteOptions { sync: true })
        .unwrap_or_else(|error| panic!("sim: a synced write after recovery fails: {error}"));
    let durable = device.durable(sector_size());
    drop(db);
    let mut expected = state;
    expected.insert(b"written-after-recovery".to_vec(), value);
    let (_, _, again) = recovered(durable, unbuffered, "a crash after a synced write after recovery");
    assert!(
        again == expected,
        "sim: after recovery, a synced write and a crash, the state is not the recovered state plus the write \
         ({} keys, expected {})",
        again.len(),
        expected.len()
    );
}

/// The run an input chooses.
struct Choice {
    input: SimInput,
    ops: Vec<Op>,
    unbuffered: bool,
    fault: Option<Fault>,
}

fn parse(data: &[u8]) -> Choice {
    let mut input = Input::new(data);
    let flags = input.u8();
    let count = usize::from(input.u8()) % (OPS_MAX + 1);
    let ops: Vec<Op> = (0..count).map(|_| read_op(&mut input)).collect();
    let parsed = SimInput {
        flags,
        ops: Vec::new(),
        fault_index: input.u16(),
        crash_point: input.u16(),
        subset_mask: input.u64(),
        tear: input.u8(),
        torn_sectors: input.u8(),
        written_len: input.u8(),
    };
    let fault = match (flags >> 1) & 3 {
        1 => Some(Fault::Write(usize::from(parsed.fault_index))),
        2 => Some(Fault::Flush(usize::from(parsed.fault_index))),
        _ => None,
    };
    Choice { input: parsed, ops, unbuffered: flags & 1 != 0, fault }
}

/// The techniques the flags switch on (see `SimInput::flags`).
fn techniques_of(flags: u8) -> Vec<&'static str> {
    let set = if (flags >> 1) & 3 == 3 { 4 } else { 0 };
    let mut techniques: Vec<&str> = lds_engine::TECHNIQUES
        .iter()
        .skip(set)
        .take(4)
        .enumerate()
        .filter(|(bit, _)| flags >> (4 + bit) & 1 != 0)
        .map(|(_, (name, _))| *name)
        .collect();
    // Size-tiered and the forest both replace leveled compaction: with both bits, the first.
    // TRIAD-LOG goes with leveled compaction only.
    if techniques.contains(&"size-tiered") {
        techniques.retain(|name| *name != "forest");
    }
    if techniques.contains(&"size-tiered") || techniques.contains(&"forest") {
        techniques.retain(|name| *name != "triad-log");
    }
    techniques
}

/// `sim`: see the module documentation; `SimInput` gives the layout of the bytes.
pub fn sim(data: &[u8]) {
    let Choice { input, ops, unbuffered, fault } = parse(data);
    // With triad-log the simulator formats its volume for it (a larger backup log, small
    // memtables: `lds_sim::workload::LOG_TABLES_BACKUP_LOG_LEN`), which `fresh_image` keeps
    // apart from the others.
    let techniques = techniques_of(input.flags);
    if let Err(error) = lds_sim::workload::set_techniques(&techniques.join(",")) {
        panic!("sim: techniques {techniques:?}: {error}");
    }
    let Some(run) = drive(&ops, unbuffered, fault) else {
        return;
    };
    let (point, image) = crash_image(&run, &input);
    if let Err((oracle, message)) = check_crash_image(&run, point, &image, unbuffered) {
        let described: Vec<String> = run.workload.ops.iter().map(Op::describe).collect();
        panic!(
            "sim: oracle {oracle} fails at crash point {point} of [{}] ({fault:?}): {message}",
            described.join(", ")
        );
    }
    if input.flags & 8 != 0 {
        write_after_recovery(&image, unbuffered, input.written_len);
    }
}

#[cfg(test)]
mod tests {
    use lds_sim::sim_device::Fault;
    use lds_sim::workload::Op;

    use super::{drive, parse, SimInput};

    #[test]
    fn the_fault_seeds_fail_an_operation_so_that_i7_is_checked() {
        let seeds: Vec<_> = crate::seeds::all().into_iter().filter(|seed| seed.target == "sim").collect();
        let faulty: Vec<_> = seeds.iter().filter(|seed| seed.name.ends_with("-eio")).collect();
        assert_eq!(faulty.len(), 2);
        for seed in faulty {
            let choice = parse(&seed.bytes);
            assert!(choice.fault.is_some(), "{}: no fault chosen", seed.name);
            let run = drive(&choice.ops, choice.unbuffered, choice.fault);
            let run = run.unwrap_or_else(|| panic!("{}: the store did not open", seed.name));
            let failed = run.spans.last().is_some_and(|span| span.end_event == usize::MAX);
            assert!(failed, "{}: the fault lies beyond the workload's writes and flushes", seed.name);
            assert_eq!(run.models.len(), run.spans.len() + 1);
        }
    }

    #[test]
    fn the_log_chunk_seeds_run_triad_log_on_its_volume_and_write_log_chunks() {
        use lds_sim::sim_device::apply;
        use lds_sim::workload::{formatted_geometry, set_techniques, LOG_TABLES_BACKUP_LOG_LEN};
        let seeds: Vec<_> = crate::seeds::all()
            .into_iter()
            .filter(|seed| seed.target == "sim" && seed.name.starts_with("log-chunks"))
            .collect();
        assert_eq!(seeds.len(), 2);
        for seed in seeds {
            let choice = parse(&seed.bytes);
            let techniques = super::techniques_of(choice.input.flags);
            assert_eq!(techniques, ["triad-log"], "{}", seed.name);
            let set = set_techniques(&techniques.join(","));
            assert!(set.is_ok(), "{}: {set:?}", seed.name);
            assert_eq!(formatted_geometry().len_backup_log, LOG_TABLES_BACKUP_LOG_LEN, "{}", seed.name);
            let run = drive(&choice.ops, choice.unbuffered, choice.fault);
            let run = run.unwrap_or_else(|| panic!("{}: the store did not open", seed.name));
            // Every write landed: the volume the run left holds log chunks.
            let mut image = run.history.initial.as_ref().clone();
            for write in &run.history.writes {
                apply(&mut image, write, run.sector_size, None);
            }
            let device = std::sync::Arc::new(lds_sim::sim_device::SimDevice::new(image));
            let options = lds_sim::workload::options(true);
            let (db, _) = lds_engine::Db::open_device_read_only(device, std::path::Path::new("seed"), options)
                .unwrap_or_else(|error| panic!("{}: {error}", seed.name));
            let log_chunks = db.chunks().iter().filter(|chunk| chunk.is_log_chunk()).count();
            assert!(log_chunks >= 2, "{}: {log_chunks} log chunks", seed.name);
        }
    }

    #[test]
    fn the_flags_choose_triad_log_only_with_leveled_compaction() {
        let second_set = 3 << 1;
        assert_eq!(super::techniques_of(second_set | 0x40), ["triad-log"]);
        assert_eq!(super::techniques_of(second_set | 0x10 | 0x40), ["size-tiered"]);
        assert_eq!(super::techniques_of(second_set | 0x20 | 0x40), ["forest"]);
        // Bit 6 of the first set is triad-disk.
        assert_eq!(super::techniques_of(0x40), ["triad-disk"]);
    }

    #[test]
    fn an_encoded_input_parses_back() {
        let input = SimInput {
            flags: 1 | (2 << 1) | 8,
            ops: vec![vec![8, 3, 2, 1], vec![3, 33], vec![4, 1, 7, 2, 9, 0], vec![5], vec![6], vec![7]],
            fault_index: 300,
            crash_point: 1234,
            subset_mask: 0xdead_beef,
            tear: 4,
            torn_sectors: 2,
            written_len: 9,
        };
        let choice = parse(&input.encode());
        let key = |number: u8| format!("key-{number:02}").into_bytes();
        let expected = vec![
            Op::Put { key: key(3), value: vec![b'b'; 2], sync: true },
            Op::Delete { key: key(1), sync: false },
            Op::Batch { entries: vec![(key(7), Some(vec![b'7'; 2])), (key(9), None)], sync: false },
            Op::Flush,
            Op::Compact,
            Op::Reopen,
        ];
        assert_eq!(choice.ops, expected);
        assert!(choice.unbuffered);
        assert_eq!(choice.fault, Some(Fault::Flush(300)));
        let parsed = &choice.input;
        let fields = (parsed.crash_point, parsed.subset_mask, parsed.tear, parsed.torn_sectors, parsed.written_len);
        assert_eq!(fields, (1234, 0xdead_beef, 4, 2, 9));
    }
}
