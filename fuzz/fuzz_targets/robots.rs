//! Fuzz target for robots.txt (RFC 9309): arbitrary bytes
//! through `lint`, `from_fetch`, `evaluate` and `report` must never panic (see
//! `policy_input.rs`).
#![no_main]

mod policy_input;

policy_input::fuzz_policy_parser!(robots, "text/plain");
