//! In-process stand-ins for the services the agent ships to, for tests (unit and
//! integration): they decode what arrives as the real ones would and inject faults.

pub mod elasticsearch;
pub mod loki;
