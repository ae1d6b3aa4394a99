//! `tern nkey gen` through the real `tern` binary: the printed seed and
//! public key decode as a pair of the asked kind, and `--seed_file`
//! writes an owner-only file that a client can sign with.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn tern(arguments: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(arguments)
        .output()
        .expect("run tern")
}

fn lines(output: &std::process::Output) -> Vec<String> {
    assert!(
        output.status.success(),
        "tern failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn gen_prints_a_matching_seed_and_public_key() {
    for (kind, seed_prefix, key_prefix, expected) in [
        ("user", "SU", "U", nkeys::KeyPairType::User),
        ("server", "SN", "N", nkeys::KeyPairType::Server),
    ] {
        let printed = lines(&tern(&["nkey", "gen", kind]));
        assert_eq!(printed.len(), 2, "{printed:?}");
        let (seed, public) = (&printed[0], &printed[1]);
        assert!(seed.starts_with(seed_prefix) && seed.len() == 58, "{seed}");
        assert!(
            public.starts_with(key_prefix) && public.len() == 56,
            "{public}"
        );
        let pair = nkeys::KeyPair::from_seed(seed).unwrap();
        assert_eq!(&pair.public_key(), public);
        assert_eq!(pair.key_pair_type(), expected);
        // A signature made with the seed verifies with the public key.
        let signature = pair.sign(b"nonce").unwrap();
        nkeys::KeyPair::from_public_key(public)
            .unwrap()
            .verify(b"nonce", &signature)
            .unwrap();
    }
    let other = lines(&tern(&["nkey", "gen", "user"]));
    let again = lines(&tern(&["nkey", "gen", "user"]));
    assert_ne!(other, again, "every pair is new");
}

#[test]
fn gen_writes_an_owner_only_seed_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("user.nk");
    let printed = lines(&tern(&[
        "nkey",
        "gen",
        "user",
        "--seed_file",
        path.to_str().unwrap(),
    ]));
    assert_eq!(printed.len(), 1, "only the public key: {printed:?}");
    let seed = std::fs::read_to_string(&path).unwrap();
    let pair = nkeys::KeyPair::from_seed(seed.trim()).unwrap();
    assert_eq!(pair.public_key(), printed[0]);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // Never overwrites.
    let refused = tern(&["nkey", "gen", "user", "--seed_file", path.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), seed);
    let wrong_kind = tern(&["nkey", "gen", "operator"]);
    assert!(!wrong_kind.status.success());
}
