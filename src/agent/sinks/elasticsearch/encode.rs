//! Encodes a batch as an Elasticsearch `_bulk` body (to be implemented).
