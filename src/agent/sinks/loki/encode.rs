//! Encodes a batch as a Loki push request (to be implemented).
