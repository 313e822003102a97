//! The chain as the writer links it and as `verify` reads it back: lines chain to the
//! previous line's bytes, a checkpoint fits the room a file keeps for it and verifies, and
//! each kind of tampering is named at its line.

use std::path::PathBuf;
use std::time::SystemTime;

use super::verify::{BreakKind, verify};
use super::*;
// The chain hashes with ring (`super::sha256`); the tests check it against the `sha2` crate.
use sha2::{Digest, Sha256};

/// A log of `records` lines with a checkpoint after every fifth, as the writer links them.
fn log(records: usize) -> (Chain, Vec<String>) {
    let mut chain = Chain::new(test_key(), "a test");
    let mut out = String::new();
    for n in 0..records {
        chain.link(&format!("{{\"event.action\":\"allow\",\"url.full\":\"http://h/{n}\"}}\n"), &mut out);
        if n % 5 == 4 {
            chain.checkpoint("interval", SystemTime::now(), &mut out);
        }
    }
    (chain, out.lines().map(str::to_owned).collect())
}

fn verified(lines: &[String]) -> (tempfile::TempDir, super::verify::Verified) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    std::fs::write(&path, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).expect("written");
    let verified = verify(&[path], None).expect("readable");
    (dir, verified)
}

fn kinds(verified: &super::verify::Verified) -> Vec<(u64, BreakKind)> {
    verified.breaks.iter().map(|b| (b.line, b.kind)).collect()
}

#[test]
fn every_line_chains_to_the_bytes_of_the_one_before() {
    let (_, lines) = log(3);
    let first: serde_json::Value = serde_json::from_str(&lines[0]).expect("JSON");
    assert_eq!(first[PREV], NO_PREV);
    assert_eq!(first[START], "a test", "a new chain says why");
    let second: serde_json::Value = serde_json::from_str(&lines[1]).expect("JSON");
    assert_eq!(second[PREV], hex::encode(Sha256::digest(lines[0].as_bytes())));
    assert_eq!(second["url.full"], "http://h/1", "the record's fields follow");
    let (_, verified) = verified(&lines);
    assert!(verified.holds(), "{:?}", verified.breaks);
}

#[test]
fn a_checkpoint_fits_its_room_and_verifies_with_its_key() {
    let (chain, lines) = log(10);
    let checkpoint = lines.iter().find(|l| is_checkpoint(l.as_bytes())).expect("a checkpoint");
    assert!(checkpoint.len() < CHECKPOINT_ROOM, "{}", checkpoint.len());
    let (dir, verified) = verified(&lines);
    assert_eq!((verified.lines, verified.checkpoints, verified.after_last_checkpoint), (12, 2, 0));
    let wrong = test_key();
    let path = dir.path().join("decisions.jsonl");
    let other = verify(std::slice::from_ref(&path), Some(wrong.public_key().as_ref())).expect("readable");
    assert_eq!(kinds(&other), vec![(6, BreakKind::Signature), (12, BreakKind::Signature)]);
    let own = verify(&[path], Some(chain.key.public_key().as_ref())).expect("readable");
    assert!(own.holds(), "{:?}", own.breaks);
}

#[test]
fn tampering_is_named_at_its_line() {
    let (_, lines) = log(15);
    let mut edited = lines.clone();
    edited[2] = edited[2].replace("http://h/2", "http://h/X");
    assert_eq!(kinds(&verified(&edited).1), vec![(3, BreakKind::Edited)]);
    let mut deleted = lines.clone();
    deleted.remove(2);
    assert_eq!(kinds(&verified(&deleted).1), vec![(3, BreakKind::Deleted)]);
    let mut swapped = lines.clone();
    swapped.swap(2, 3);
    assert!(kinds(&verified(&swapped).1).contains(&(3, BreakKind::Reordered)));
    let mut inserted = lines.clone();
    inserted.insert(2, lines[1].replace("http://h/1", "http://h/forged"));
    assert_eq!(kinds(&verified(&inserted).1), vec![(3, BreakKind::Inserted)]);
}

#[test]
fn a_chain_resumes_from_the_last_line_of_the_file() {
    let (_, lines) = log(7);
    let dir = tempfile::tempdir().expect("a temp dir");
    let path: PathBuf = dir.path().join("decisions.jsonl");
    std::fs::write(&path, lines.iter().map(|l| format!("{l}\n")).collect::<String>()).expect("written");
    let mut chain = Chain::resume(&path, test_key());
    assert_eq!(chain.since(), 2, "the lines after the last checkpoint");
    let mut out = String::new();
    chain.link("{\"event.action\":\"allow\"}\n", &mut out);
    let line: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(line[PREV], hex::encode(Sha256::digest(lines[lines.len() - 1].as_bytes())));
    assert!(line[START].is_null());
    let missing = Chain::resume(&dir.path().join("none.jsonl"), test_key());
    assert_eq!(missing.since(), 0);
}

#[test]
fn the_chain_hash_is_sha256_of_the_line_without_its_newline() {
    for line in ["", "{}", "{\"a\":\"é\"}", &"x".repeat(1_000), &"{\"long\":1}".repeat(700)] {
        assert_eq!(sha256(line.as_bytes()), <[u8; 32]>::from(Sha256::digest(line.as_bytes())), "{} bytes", line.len());
    }
}
