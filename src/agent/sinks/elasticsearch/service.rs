//! Sends `_bulk` requests to Elasticsearch (to be implemented).

use super::config::EsConfig;
use crate::agent::batch::Batch;
use crate::agent::sinks::{Delivery, SendError};

/// An Elasticsearch bulk client.
pub struct EsSink {
    #[allow(dead_code)]
    cfg: EsConfig,
}

impl EsSink {
    pub fn new(cfg: EsConfig) -> EsSink {
        EsSink { cfg }
    }

    pub async fn send(&mut self, _batch: &Batch, _only: Option<&[u32]>) -> Result<(Delivery, usize), SendError> {
        Err(SendError::Permanent("the Elasticsearch sink is not implemented yet".into()))
    }
}
