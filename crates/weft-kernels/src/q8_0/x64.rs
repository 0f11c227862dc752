//! x64 twins of `q8_0.matvec`.
