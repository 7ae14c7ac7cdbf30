#!/usr/bin/env bash
# Every test: formatting and lints, the Rust workspace, and the Kaitai cross-check of every
# fixture in three languages. Installs what it needs (Python packages from PyPI, the Kaitai
# compiler and JavaScript runtime from npm, the Kaitai Java runtime from Maven Central).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
# A fresh clone builds once: incremental state would only take disk (GBs of it).
export CARGO_INCREMENTAL=0
step() { echo; echo "== $*"; }

step "install: Python packages (tools/requirements.txt)"
python3 -m pip install --quiet --disable-pip-version-check -r tools/requirements.txt

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --all-targets -- -D warnings

step "cargo build --release (the lds binary the cross-check runs)"
cargo build --quiet --release -p lds-cli

step "cargo test (format, engine, cli, fixtures; loop-device test needs root)"
cargo test --quiet --workspace 2>&1 | tee /tmp/lds-cargo-test.log
grep -q "test result: ok" /tmp/lds-cargo-test.log

step "oracle self-check (docs/reliability.md L6): deliberately broken builds must fail the crash enumeration"
for fault in fault-drop-chunk-flush fault-skip-payload-checksum fault-clean-before-journal; do
  cargo test --quiet -p lds-sim --features "$fault" --test oracle_self_check
done

step "Kaitai: compile formats/*.ksy to Python, JavaScript and Java; the three readers against lds dump and lds scan"
bash tools/kaitai/compile.sh
# The readers' scratch volumes go to a directory of this run, removed when it ends: pytest's
# default keeps the last three runs (GiBs of sparse-but-written images) in /tmp.
basetemp="$(mktemp -d "${TMPDIR:-/tmp}/lds-pytest.XXXXXX")"
trap 'rm -rf "$basetemp"' EXIT
LDS_BIN="$PWD/target/release/lds" python3 -m pytest -q --basetemp "$basetemp" tools/tests
