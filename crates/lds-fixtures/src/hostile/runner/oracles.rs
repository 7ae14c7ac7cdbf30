//! The oracles' rules over what the commands printed and left (docs/reliability.md I6, I10):
//! which files may change, what counts as a crash, the keys and values salvage and scan print,
//! and whether a key repair did not keep is named in its report.

use std::collections::BTreeMap;

use super::super::{Crafted, Volume};
use super::child::Outcome;
use super::Options;

/// What repair did with a key salvage read intact, when the repaired volume does not hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// A `lost` range of one of its fixes covers the key (docs/repair-json.md: the entries a
    /// fix drops, by instance and key range).
    Named,
    /// Repair's report drops data, but no `lost` range covers the key: a finding (I10).
    Unnamed,
    /// Repair dropped nothing and the key is gone: a finding.
    Silent,
}

/// A `lost` range of repair's `--json` report, as far as keys go (the runner does not know
/// the sequence salvage read a key at): instance, the first key (inclusive, or after it),
/// the last key (inclusive); `None` ends are open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostKeys {
    /// The instance.
    pub instance: u32,
    /// The lower end: (key, inclusive).
    pub from: Option<(Vec<u8>, bool)>,
    /// The upper end, inclusive.
    pub through: Option<Vec<u8>>,
}

impl LostKeys {
    /// Whether `key` of `instance` lies in the range.
    pub fn covers(&self, instance: u32, key: &[u8]) -> bool {
        let above = match &self.from {
            None => true,
            Some((from, true)) => key >= from.as_slice(),
            Some((after, false)) => key > after.as_slice(),
        };
        instance == self.instance && above && self.through.as_ref().is_none_or(|through| key <= through.as_slice())
    }

    /// Every range of every fix of a report.
    pub fn of_report(report: &serde_json::Value) -> Vec<Self> {
        let unhex = |value: Option<&serde_json::Value>| value.and_then(serde_json::Value::as_str).and_then(unhex);
        report
            .get("fixes")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|fix| fix.get("lost").and_then(serde_json::Value::as_array))
            .flatten()
            .map(|range| Self {
                instance: range.get("instance").and_then(serde_json::Value::as_u64).unwrap_or(0) as u32,
                from: unhex(range.get("key_from"))
                    .map(|key| (key, true))
                    .or_else(|| unhex(range.get("key_after")).map(|key| (key, false))),
                through: unhex(range.get("key_through")),
            })
            .collect()
    }
}

/// What changed between two snapshots, but the files `allowed`: a sentence, or `None`.
pub(super) fn unexpected_changes(
    before: &BTreeMap<String, [u8; 32]>,
    after: &BTreeMap<String, [u8; 32]>,
    allowed: &[&str],
) -> Option<String> {
    let mut changes = Vec::new();
    for (name, hash) in after {
        if allowed.contains(&name.as_str()) {
            continue;
        }
        match before.get(name) {
            None => changes.push(format!("created {name}")),
            Some(old) if old != hash => changes.push(format!("changed {name}")),
            Some(_) => {}
        }
    }
    changes.extend(before.keys().filter(|name| !after.contains_key(*name)).map(|name| format!("removed {name}")));
    (!changes.is_empty()).then(|| changes.join(", "))
}

/// The last lines of standard error, for a finding.
pub(super) fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    lines[start..].join(" / ").chars().take(400).collect()
}

/// The findings of I6 on one outcome: a panic, a hang, a death by a signal.
pub(super) fn crash_findings(outcome: &Outcome, options: &Options) -> Option<String> {
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    if outcome.timed_out {
        return Some(format!("hang: killed after {} s", options.timeout.as_secs()));
    }
    if let Some(signal) = outcome.signal {
        let memory =
            if stderr.contains("memory allocation") { " (an allocation refused under the memory limit)" } else { "" };
        return Some(format!("killed by signal {signal}{memory}: {}", tail(&outcome.stderr)));
    }
    if outcome.code == Some(101) || stderr.contains("panicked at") {
        return Some(format!("panic: {}", tail(&outcome.stderr)));
    }
    None
}

/// A key and value, as `lds scan --json` and `lds salvage --export ndjson` print them.
pub type Pairs = BTreeMap<(u32, Vec<u8>), Vec<u8>>;

pub(super) fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len() / 2).map(|index| u8::from_str_radix(text.get(2 * index..2 * index + 2)?, 16).ok()).collect()
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Parses JSON lines of `key`/`value` (or `key_hex`/`value_hex`) and an optional `instance`.
pub fn parse_pairs(text: &[u8], default_instance: u32, into: &mut Pairs) {
    for line in String::from_utf8_lossy(text).lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let field = |name: &str| -> Option<Vec<u8>> {
            match (
                value.get(name).and_then(|text| text.as_str()),
                value.get(format!("{name}_hex")).and_then(|text| text.as_str()),
            ) {
                (Some(text), _) => Some(text.as_bytes().to_vec()),
                (None, Some(text)) => unhex(text),
                (None, None) => None,
            }
        };
        let instance = value.get("instance").and_then(serde_json::Value::as_u64).map_or(default_instance, |i| i as u32);
        if let (Some(key), Some(data)) = (field("key"), field("value")) {
            into.insert((instance, key), data);
        }
    }
}

/// fsck's codes for the states a crash leaves at a log's head (SPEC.md §9.6): the head object
/// incomplete (206), a gap or stale bytes at the backup log's head (306), valid objects after
/// it (307). Salvage reads the batches past such a tail; recovery rightly does not.
pub const CRASH_TAIL_CODES: [u64; 3] = [206, 306, 307];

/// True when the case lowers the lsn or SN in the header of the backup log's newest batch:
/// what stale bytes of an earlier lap, or an unsynced append of an earlier session, leave at
/// the head (SPEC.md §9.5, §9.6). Recovery rightly ends the log before it, and fsck reports
/// nothing, as after any wrap.
pub fn head_leftover(crafted: &Crafted, healthy: &Volume) -> bool {
    let field = &crafted.field;
    let lowered = super::super::read_le(&crafted.value, 0, field.width)
        < super::super::read_le(&healthy.files[field.file], field.at, field.width);
    lowered && (field.path == "blog.wb.header.lsn" || field.path == "blog.wb.header.sn")
}

/// What salvage read from the crafted volume, and whether fsck saw a crash's tail there.
pub struct Salvaged<'a> {
    /// The keys and values `salvage --export ndjson` printed (None: it failed).
    pub pairs: Option<&'a Pairs>,
    /// fsck reported one of [`CRASH_TAIL_CODES`], or the case leaves the head as a crash
    /// does ([`head_leftover`]).
    pub crash_tail: bool,
}

/// The problem codes of an `lds fsck --json` document.
pub fn problem_codes(json: &[u8]) -> Vec<u64> {
    let Ok(document) = serde_json::from_slice::<serde_json::Value>(json) else { return Vec::new() };
    document
        .get("problems")
        .and_then(serde_json::Value::as_array)
        .map(|problems| {
            problems.iter().filter_map(|problem| problem.get("code").and_then(serde_json::Value::as_u64)).collect()
        })
        .unwrap_or_default()
}

/// Whether a key missing after repair is named in its report ([`Loss`]): covered by one of
/// its `lost` ranges; `drops` says whether the report drops anything at all.
pub fn loss(instance: u32, key: &[u8], lost: &[LostKeys], drops: bool) -> Loss {
    if lost.iter().any(|range| range.covers(instance, key)) {
        Loss::Named
    } else if drops || !lost.is_empty() {
        Loss::Unnamed
    } else {
        Loss::Silent
    }
}
