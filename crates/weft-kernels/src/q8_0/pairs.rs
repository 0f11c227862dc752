//! The row-pair-interleaved `q8_0.matvec` arm (SMMLA layout). Filled in by its author.
