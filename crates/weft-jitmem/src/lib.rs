//! weft-jitmem (being written).
