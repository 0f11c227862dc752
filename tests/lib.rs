//! Cross-crate tests for Weft live beside this file, one file per path
//! through the engine; this library is empty on purpose.
