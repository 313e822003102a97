//! Configuration: placeholder.
