//! arm64 twins of `q8_0.matvec` (SDOT). Filled in by its author.
