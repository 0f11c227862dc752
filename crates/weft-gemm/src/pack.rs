//! B packed into column panels: the plan-time operand of the `panels` and
//! `small_m` arms and their twins.
//!
//! Panel `p` holds columns `16p .. 16p + 16` of B for every `k`, one
//! 64-byte line per `k`: element `(kk, j)` is at
//! `((j / 16) · k + kk) · 16 + j % 16`. Columns past `n` are `+0.0`, so a
//! body may compute a ragged panel's whole line and store only the
//! columns that exist. Storage is 64-byte aligned: a line is exactly one
//! cache line and one zmm, two ymm or four NEON q registers.

use std::sync::Arc;

use weft_kernel::{PackedOperand, Refusal};

use crate::{BLayout, MatRef};

/// The layout's name, as offers and twins check it.
pub const PANELS_LAYOUT: &str = "f32.gemm.panels16";

/// Columns per panel.
pub const PANEL_WIDTH: usize = 16;

/// One panel line: 16 f32, cache-line aligned.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(64))]
struct Line([f32; PANEL_WIDTH]);

/// B (`k × n`) in panels (module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct PackedB {
    lines: Vec<Line>,
    k: usize,
    n: usize,
}

impl PackedB {
    /// Pack `b`: `k × n` for [`BLayout::Rows`], `n × k` for
    /// [`BLayout::Transposed`].
    pub fn pack(b: MatRef<'_>, layout: BLayout) -> Result<PackedB, Refusal> {
        b.check("b")?;
        let (k, n) = match layout {
            BLayout::Rows => (b.rows, b.cols),
            BLayout::Transposed => (b.cols, b.rows),
        };
        let panels = n.div_ceil(PANEL_WIDTH);
        let mut lines = vec![Line([0.0; PANEL_WIDTH]); panels * k];
        for p in 0..panels {
            for kk in 0..k {
                let line = &mut lines[p * k + kk].0;
                for (c, slot) in line.iter_mut().enumerate() {
                    let j = p * PANEL_WIDTH + c;
                    if j < n {
                        *slot = match layout {
                            BLayout::Rows => b.data[kk * b.ld + j],
                            BLayout::Transposed => b.data[j * b.ld + kk],
                        };
                    }
                }
            }
        }
        Ok(PackedB { lines, k, n })
    }

    /// Rows of B (`k`).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns of B (`n`).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Element `(kk, j)` of B.
    pub fn get(&self, kk: usize, j: usize) -> f32 {
        self.lines[(j / PANEL_WIDTH) * self.k + kk].0[j % PANEL_WIDTH]
    }

    /// The first element of panel 0 (what a body's `b` points at).
    pub fn as_ptr(&self) -> *const f32 {
        self.lines.as_ptr().cast()
    }

    /// The packed bytes (little-endian f32).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.lines
            .iter()
            .flat_map(|l| l.0.iter().flat_map(|v| v.to_le_bytes()))
            .collect()
    }

    /// As an offer's packed operand `b`.
    pub fn operand(&self) -> PackedOperand {
        PackedOperand {
            name: "b",
            layout: PANELS_LAYOUT,
            bytes: Arc::from(self.to_bytes()),
        }
    }

    /// Back from an offer's operand for a `k × n` B (copied into aligned
    /// storage). Another layout or another length is `bad-operand`.
    pub fn from_operand(op: &PackedOperand, k: usize, n: usize) -> Result<PackedB, Refusal> {
        let bad = |reason: String| Refusal::BadOperand {
            operand: op.name.to_owned(),
            reason,
        };
        if op.layout != PANELS_LAYOUT {
            return Err(bad(format!("layout {} is not {PANELS_LAYOUT}", op.layout)));
        }
        let lines = n.div_ceil(PANEL_WIDTH) * k;
        if op.bytes.len() != lines * 64 {
            return Err(bad(format!(
                "{} bytes, {k} × {n} in panels is {}",
                op.bytes.len(),
                lines * 64
            )));
        }
        let lines = op
            .bytes
            .chunks_exact(64)
            .map(|c| {
                let mut l = [0.0f32; PANEL_WIDTH];
                for (slot, w) in l.iter_mut().zip(c.chunks_exact(4)) {
                    *slot = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                }
                Line(l)
            })
            .collect();
        Ok(PackedB { lines, k, n })
    }
}
