//! `agentgate lint`: placeholder.
