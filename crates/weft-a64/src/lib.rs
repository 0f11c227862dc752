//! weft-a64 (being written).
