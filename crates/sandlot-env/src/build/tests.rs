use super::*;

#[test]
fn atomic_json_is_world_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.json");
    write_json_atomic(&path, &serde_json::json!({"a": 1})).unwrap();
    let meta = fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    let v: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
    assert_eq!(v["a"], 1);
    assert!(!dir.path().join(".x.json.tmp").exists());
}

fn host() -> Runner {
    Runner::new(&Isolation::None, Path::new("/usr/bin/python3")).unwrap()
}

#[test]
fn missing_marker_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        ready_env(&dir.path().join("nope"), "abc", &host()),
        Err(NotReady::Missing)
    ));
    fs::write(dir.path().join(MARKER_FILE), b"{not json").unwrap();
    assert!(matches!(
        ready_env(dir.path(), "abc", &host()),
        Err(NotReady::Broken(_))
    ));
}

#[test]
fn shorten_cuts_long_messages() {
    assert_eq!(shorten("abc", 5), "abc");
    assert_eq!(shorten("abcdef", 3), "abc…");
}
