//! The activation quantiser family `q8_0.quantize`. Filled in by its author.
