//! Sends encoded batches to Loki (to be implemented).

use super::config::LokiConfig;
use crate::agent::batch::Batch;
use crate::agent::sinks::{Delivery, SendError};

/// A Loki push client.
pub struct LokiSink {
    #[allow(dead_code)]
    cfg: LokiConfig,
}

impl LokiSink {
    pub fn new(cfg: LokiConfig) -> LokiSink {
        LokiSink { cfg }
    }

    pub async fn send(&mut self, _batch: &Batch, _only: Option<&[u32]>) -> Result<(Delivery, usize), SendError> {
        Err(SendError::Permanent("the Loki sink is not implemented yet".into()))
    }
}
