//! The SMMLA arm64 twin of the row-pair arm. Filled in by its author.
