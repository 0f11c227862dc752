//! a64 twins of the `f32.gemm` arms (being written).

use std::sync::Arc;

use weft_kernel::Twin;

use crate::arm::ArmKind;

/// The a64 twins of `kind`'s offer.
pub fn twins(_kind: ArmKind) -> Vec<Arc<dyn Twin>> {
    Vec::new()
}
