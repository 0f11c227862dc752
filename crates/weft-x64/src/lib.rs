//! weft-x64 (being written).
