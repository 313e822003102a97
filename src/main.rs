//! The `agentgate` command line.
fn main() {}
