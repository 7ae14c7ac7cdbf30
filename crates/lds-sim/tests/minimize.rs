//! Guards the reproducer minimizer of `lds crashtest` (delta debugging): on a deliberately
//! failing predicate it finds the few operations the failure needs, in order, and shrinks
//! their values; it stays within its budget.

use std::time::Duration;

use lds_sim::minimize::{shrink, Budget};
use lds_sim::workload::{random, Op, Workload};

/// The ops the predicate needs, compared by kind and key (values may shrink, not vanish).
fn same(needed: &Op, op: &Op) -> bool {
    match (needed, op) {
        (Op::Put { key: a, .. }, Op::Put { key: b, value, .. }) => a == b && !value.is_empty(),
        (Op::Delete { key: a, .. }, Op::Delete { key: b, .. }) => a == b,
        (Op::Flush, Op::Flush) | (Op::Compact, Op::Compact) | (Op::Reopen, Op::Reopen) => true,
        (Op::Batch { entries: a, .. }, Op::Batch { entries: b, .. }) => {
            a.first().map(|entry| &entry.0) == b.first().map(|entry| &entry.0)
        }
        _ => false,
    }
}

/// True when `workload` holds `needed` as a subsequence.
fn holds(workload: &Workload, needed: &[Op]) -> bool {
    let mut rest = needed.iter().peekable();
    for op in &workload.ops {
        if rest.peek().is_some_and(|next| same(next, op)) {
            rest.next();
        }
    }
    rest.peek().is_none()
}

#[test]
fn the_minimizer_keeps_only_what_the_failure_needs() {
    let workload = random(7, 150);
    let put =
        |index: usize| workload.ops[index..].iter().position(|op| matches!(op, Op::Put { .. })).map(|at| index + at);
    let first = put(10).unwrap_or_else(|| panic!("no put"));
    let second = put(80).unwrap_or_else(|| panic!("no put"));
    let flush = workload.ops[first..].iter().position(|op| matches!(op, Op::Flush)).map(|at| first + at);
    let needed: Vec<Op> =
        [Some(first), flush, Some(second)].into_iter().flatten().map(|index| workload.ops[index].clone()).collect();
    assert!(needed.len() == 3 && holds(&workload, &needed), "the workload does not hold what the test needs");
    let mut calls = 0u64;
    let mut reports = 0u64;
    let shrunk = shrink(
        &workload,
        Budget::tries(2_000),
        &mut |candidate| {
            calls += 1;
            holds(candidate, &needed)
        },
        &mut |_| reports += 1,
    );
    eprintln!("{} operations down to {} in {} tries", workload.ops.len(), shrunk.workload.ops.len(), shrunk.tries);
    assert_eq!(calls, shrunk.tries);
    assert_eq!(reports, shrunk.tries, "progress is reported after every candidate");
    assert!(!shrunk.budget_exhausted);
    assert!(holds(&shrunk.workload, &needed), "the minimized workload no longer fails");
    assert_eq!(shrunk.workload.ops.len(), 3, "{:#?}", shrunk.workload.ops);
    for op in &shrunk.workload.ops {
        if let Op::Put { value, .. } = op {
            assert_eq!(value.len(), 1, "a value was not shrunk: {op:?}");
        }
    }
}

#[test]
fn the_minimizer_stops_at_its_budget() {
    let workload = random(3, 100);
    let shrunk = shrink(&workload, Budget::tries(5), &mut |candidate| candidate.ops.len() > 10, &mut |_| {});
    assert_eq!(shrunk.tries, 5);
    assert!(shrunk.budget_exhausted);
    assert!(shrunk.workload.ops.len() > 10, "the result must still fail");
}

#[test]
fn the_minimizer_stops_at_its_time_budget() {
    let workload = random(3, 100);
    let budget = Budget { tries_max: u64::MAX, time_max: Some(Duration::from_millis(200)) };
    let mut last = None;
    let shrunk = shrink(
        &workload,
        budget,
        &mut |candidate| {
            std::thread::sleep(Duration::from_millis(20));
            candidate.ops.len() > 10
        },
        &mut |progress| last = Some(progress),
    );
    assert!(shrunk.budget_exhausted);
    assert!(shrunk.tries < 40, "{} candidates in a 200 ms budget of 20 ms candidates", shrunk.tries);
    let Some(last) = last else { panic!("no progress reported") };
    assert_eq!(last.tries, shrunk.tries);
    assert_eq!(last.operations, shrunk.workload.ops.len());
    assert!(shrunk.workload.ops.len() > 10, "the result must still fail");
}
