//! `agentgate explain`: placeholder.
