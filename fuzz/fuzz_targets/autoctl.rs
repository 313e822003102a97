//! Fuzz target for automation-preferences.txt (draft-liao-aipref-autoctl-core): arbitrary bytes
//! through `lint`, `from_fetch`, `evaluate` and `report` must never panic (see
//! `policy_input.rs`).
#![no_main]

mod policy_input;

policy_input::fuzz_policy_parser!(autoctl, "text/plain");
