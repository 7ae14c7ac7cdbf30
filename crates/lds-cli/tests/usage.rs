//! Guards what a user who knows e2fsck gets from habits `lds` does not share: `lds fsck -y`
//! (or -p, -a) is a usage error (16) that points to `lds repair`, and writes nothing.

use std::process::Command;

#[test]
fn fsck_with_a_fixing_mode_points_to_repair() {
    let path = std::env::temp_dir().join(format!("lds-usage-{}.img", std::process::id()));
    std::fs::write(&path, vec![0xa5u8; 1 << 16]).unwrap_or_else(|error| panic!("{error}"));
    for mode in ["-y", "-p", "-a"] {
        let output = Command::new(env!("CARGO_BIN_EXE_lds"))
            .args(["fsck", mode])
            .arg(&path)
            .output()
            .unwrap_or_else(|error| panic!("{error}"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(16), "fsck {mode}: {stderr}");
        assert!(stderr.contains("lds repair -p or -y"), "fsck {mode}: {stderr}");
    }
    let untouched = std::fs::read(&path).unwrap_or_default() == vec![0xa5u8; 1 << 16];
    let _ = std::fs::remove_file(&path);
    assert!(untouched, "the file was written");
}
