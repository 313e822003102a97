//! The gate's table tests.

use super::*;

#[test]
fn every_entry_is_documented_in_the_decision_log() {
    let doc = include_str!("../../docs/decision-log.md");
    let row =
        doc.lines().find(|line| line.starts_with("| `agentgate.entry`")).expect("docs/decision-log.md has the row");
    let entries = [Entry::Forward, Entry::Mitm, Entry::PlainTunnel, Entry::Connect, Entry::Transparent { tls: true }];
    for entry in entries {
        assert!(row.contains(&format!("`{}`", entry.as_str())), "{} is not in: {row}", entry.as_str());
    }
    assert!(Entry::Transparent { tls: true }.is_tls() && !Entry::Transparent { tls: false }.is_tls());
    assert!(Entry::Mitm.is_tls() && !Entry::PlainTunnel.is_tls());
}
