//! The filter packed at plan time: the operand `w` of both arms and their
//! twins, one 64-byte line (16 f32, one zmm, two ymm, four f32x4) per
//! step a body takes.
//!
//! Both layouts start with the bias: `panels` lines, one lane a channel
//! (`+0.0` where the site has no bias and in padding lanes). Then:
//!
//! - [`DIRECT_LAYOUT`] (every `groups` the direct family serves): with
//!   `cin_g = cin / groups`, `cout_g = cout / groups` and `P_g =
//!   ⌈cout_g / 16⌉` panels a group, `panels = groups · P_g`. Panel `p =
//!   g · P_g + q` (group `g`, panel `q` within it) holds the output
//!   channels `co = g · cout_g + 16q + lane` for the lanes with `16q +
//!   lane < cout_g`; its other lanes are `+0.0`, so a panel never mixes
//!   groups. Bias line `p` holds `bias[co]` at `lane`; for tap `(kh, kw)`
//!   and input channel `ci` of the group (`0 … cin_g − 1`), the line
//!   `panels + ((p · k_h + kh) · k_w + kw) · cin_g + ci` holds
//!   `w[co, kh, kw, ci]`, so a tile walks one panel's lines in order as
//!   its `ci` loop runs. At `groups = 1` this is channel `co` at lane
//!   `co % 16` of panel `co / 16`, `cin_g = cin`: the layout as it was
//!   before groups, byte for byte;
//! - [`DEPTHWISE_LAYOUT`]: channel `co` at lane `co % 16` of panel
//!   `p = co / 16` (`panels = ⌈cout / 16⌉`); bias line `p`, then for tap
//!   `(kh, kw)` the line `panels + (p · k_h + kh) · k_w + kw` holds
//!   `w[16p + lane, kh, kw, 0]`.
//!
//! - [`WINOGRAD_LAYOUT`] (the Winograd arm of `conv.direct`): the bias in
//!   `2 · ⌈cout / 32⌉` lines, then the transformed filter `U = G g Gᵀ`
//!   (computed here, at plan time, in the order
//!   [`crate::winograd::filter_transform`] fixes): for position `ξ`
//!   (0–15), panel `p` of 32 output channels and input channel `ci`, the
//!   two lines `bias + ((ξ · ⌈cout/32⌉ + p) · cin + ci) · 2 + h` hold
//!   `U[ξ][ci][32p + 16h + lane]`.
//!
//! - [`GROUPED_LAYOUT`] (the grouped arm of `conv.direct`,
//!   [`crate::grouped`], `cout_g` dividing 16): panels of 16 output
//!   channels across groups, channel `co` at lane `co % 16` of panel
//!   `p = co / 16` (`⌈cout / 16⌉` panels; panel `p` covers the `16 /
//!   cout_g` groups from `g0 = 16p / cout_g`, lane `l` being channel
//!   `(g0 + l / cout_g) · cout_g + l % cout_g`); bias line `p`, then for
//!   tap `(kh, kw)` and input channel `ci` of the lane's group the line
//!   `panels + ((p · k_h + kh) · k_w + kw) · cin_g + ci` holds
//!   `w[co, kh, kw, ci]`.
//!
//! Lanes past `cout` are `+0.0`, so a body may compute a ragged panel's
//! whole line and store only the channels that exist. Storage is 64-byte
//! aligned.

use std::sync::Arc;

use weft_kernel::{PackedOperand, Refusal};

use crate::arm::ArmKind;
use crate::{bad, ConvGeometry, PANEL};
use crate::{grouped, winograd};

pub use crate::grouped::GROUPED_LAYOUT;
pub use crate::winograd::WINOGRAD_LAYOUT;

/// The direct arm's layout name, as offers and twins check it.
pub const DIRECT_LAYOUT: &str = "conv.direct.bias+panels16";

/// The depthwise arm's layout name.
pub const DEPTHWISE_LAYOUT: &str = "conv.depthwise.bias+taps16";

/// One line: 16 f32, cache-line aligned.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C, align(64))]
pub(crate) struct Line(pub(crate) [f32; PANEL]);

/// A filter and bias in one arm's layout (module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct PackedFilter {
    kind: ArmKind,
    /// Packed for the Winograd arm of `conv.direct` (then `kind` is
    /// `Direct`).
    winograd: bool,
    /// Packed for the grouped arm of `conv.direct` ([`GROUPED_LAYOUT`];
    /// then `kind` is `Direct`).
    grouped: bool,
    lines: Vec<Line>,
    cout: u64,
    cin_g: u64,
    groups: u64,
    k_h: u64,
    k_w: u64,
}

impl PackedFilter {
    /// Pack the OHWI filter `w` (`g.w_len()` elements) and the optional
    /// `bias` (`cout`) for `kind`'s arm. Refused by name when the lengths
    /// disagree with `g` or `g` is not a geometry the arm serves.
    pub fn pack(
        kind: ArmKind,
        g: &ConvGeometry,
        w: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<PackedFilter, Refusal> {
        kind.serves(g)?;
        let shape = g.check()?;
        if w.len() != g.w_len() {
            return Err(bad(
                "w",
                format!("{} elements, a {:?} filter has {}", w.len(), g, g.w_len()),
            ));
        }
        if let Some(b) = bias {
            if b.len() as u64 != g.cout {
                return Err(bad(
                    "bias",
                    format!("{} elements, cout = {}", b.len(), g.cout),
                ));
            }
        }
        let (panels, taps) = (shape.panels as usize, (g.k_h * g.k_w) as usize);
        let cin_g = (g.cin / g.groups) as usize;
        let per_panel = match kind {
            ArmKind::Direct => taps * cin_g,
            ArmKind::Depthwise => taps,
        };
        let mut lines = vec![Line([0.0; PANEL]); panels * (1 + per_panel)];
        for co in 0..g.cout as usize {
            let (p, lane) = slot_of(kind, g.cout, g.groups, co);
            lines[p].0[lane] = bias.map_or(0.0, |b| b[co]);
            for t in 0..taps {
                for ci in 0..cin_g {
                    let line = panels + p * per_panel + t * cin_g + ci;
                    lines[line].0[lane] = w[(co * taps + t) * cin_g + ci];
                }
            }
        }
        Ok(PackedFilter {
            kind,
            winograd: false,
            grouped: false,
            lines,
            cout: g.cout,
            cin_g: cin_g as u64,
            groups: g.groups,
            k_h: g.k_h,
            k_w: g.k_w,
        })
    }

    /// Pack the OHWI filter `w` and the optional `bias` for the Winograd
    /// arm ([`WINOGRAD_LAYOUT`]): the filter transform runs here, once.
    /// Refused by name as [`PackedFilter::pack`] refuses, and for
    /// geometries the Winograd arm does not serve.
    pub fn pack_winograd(
        g: &ConvGeometry,
        w: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<PackedFilter, Refusal> {
        winograd::serves(g)?;
        g.check()?;
        if w.len() != g.w_len() {
            return Err(bad(
                "w",
                format!("{} elements, a {:?} filter has {}", w.len(), g, g.w_len()),
            ));
        }
        if let Some(b) = bias {
            if b.len() as u64 != g.cout {
                return Err(bad(
                    "bias",
                    format!("{} elements, cout = {}", b.len(), g.cout),
                ));
            }
        }
        let (wp, cin) = (winograd::wpanels(g.cout) as usize, g.cin as usize);
        let lines_n = Self::winograd_lines(g);
        let mut lines = vec![Line([0.0; PANEL]); lines_n];
        let bias_lines = 2 * wp;
        for co in 0..g.cout as usize {
            lines[co / PANEL].0[co % PANEL] = bias.map_or(0.0, |b| b[co]);
            let (p, h, lane) = (co / 32, (co % 32) / PANEL, co % PANEL);
            for ci in 0..cin {
                let mut taps = [[0.0f32; 3]; 3];
                for (r, row) in taps.iter_mut().enumerate() {
                    for (s, t) in row.iter_mut().enumerate() {
                        *t = w[((co * 3 + r) * 3 + s) * cin + ci];
                    }
                }
                let u = winograd::filter_transform(taps);
                for xi in 0..16 {
                    let line = bias_lines + ((xi * wp + p) * cin + ci) * 2 + h;
                    lines[line].0[lane] = u[xi / 4][xi % 4];
                }
            }
        }
        Ok(PackedFilter {
            kind: ArmKind::Direct,
            winograd: true,
            grouped: false,
            lines,
            cout: g.cout,
            cin_g: g.cin,
            groups: 1,
            k_h: g.k_h,
            k_w: g.k_w,
        })
    }

    /// Pack the OHWI filter `w` and the optional `bias` for the grouped
    /// arm ([`GROUPED_LAYOUT`]). Refused by name as [`PackedFilter::pack`]
    /// refuses, and for geometries the grouped arm does not serve.
    pub fn pack_grouped(
        g: &ConvGeometry,
        w: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<PackedFilter, Refusal> {
        grouped::serves(g)?;
        g.check()?;
        if w.len() != g.w_len() {
            return Err(bad(
                "w",
                format!("{} elements, a {:?} filter has {}", w.len(), g, g.w_len()),
            ));
        }
        if let Some(b) = bias {
            if b.len() as u64 != g.cout {
                return Err(bad(
                    "bias",
                    format!("{} elements, cout = {}", b.len(), g.cout),
                ));
            }
        }
        let panels = grouped::panels(g) as usize;
        let (taps, cin_g) = ((g.k_h * g.k_w) as usize, (g.cin / g.groups) as usize);
        let mut lines = vec![Line([0.0; PANEL]); Self::grouped_lines(g)];
        for co in 0..g.cout as usize {
            let (p, lane) = (co / PANEL, co % PANEL);
            lines[p].0[lane] = bias.map_or(0.0, |b| b[co]);
            for t in 0..taps {
                for ci in 0..cin_g {
                    let line = panels + (p * taps + t) * cin_g + ci;
                    lines[line].0[lane] = w[(co * taps + t) * cin_g + ci];
                }
            }
        }
        Ok(PackedFilter {
            kind: ArmKind::Direct,
            winograd: false,
            grouped: true,
            lines,
            cout: g.cout,
            cin_g: cin_g as u64,
            groups: g.groups,
            k_h: g.k_h,
            k_w: g.k_w,
        })
    }

    /// Lines of a grouped packing for `g`.
    fn grouped_lines(g: &ConvGeometry) -> usize {
        let taps = (g.k_h * g.k_w) as usize;
        grouped::panels(g) as usize * (1 + taps * (g.cin / g.groups.max(1)) as usize)
    }

    /// Whether this is the grouped arm's packing ([`GROUPED_LAYOUT`]).
    pub fn is_grouped(&self) -> bool {
        self.grouped
    }

    /// Lines of a Winograd packing for `g`.
    fn winograd_lines(g: &ConvGeometry) -> usize {
        let wp = winograd::wpanels(g.cout) as usize;
        2 * wp * (1 + 16 * g.cin as usize)
    }

    /// Whether this is the Winograd arm's packing ([`WINOGRAD_LAYOUT`]).
    pub fn is_winograd(&self) -> bool {
        self.winograd
    }

    /// This packing's layout name.
    pub fn layout_name(&self) -> &'static str {
        if self.winograd {
            WINOGRAD_LAYOUT
        } else if self.grouped {
            GROUPED_LAYOUT
        } else {
            Self::layout(self.kind)
        }
    }

    /// The layout's name for `kind`.
    pub fn layout(kind: ArmKind) -> &'static str {
        match kind {
            ArmKind::Direct => DIRECT_LAYOUT,
            ArmKind::Depthwise => DEPTHWISE_LAYOUT,
        }
    }

    /// Which family's layout this is (`Direct` for the Winograd packing
    /// too: [`PackedFilter::is_winograd`] tells them apart).
    pub fn kind(&self) -> ArmKind {
        self.kind
    }

    /// Whether this filter is packed for `g` (family, channels, groups,
    /// kernel): `bad-operand` otherwise.
    pub fn fits(&self, g: &ConvGeometry) -> Result<(), Refusal> {
        let want = (g.cout, g.cin / g.groups.max(1), g.groups, g.k_h, g.k_w);
        let have = (self.cout, self.cin_g, self.groups, self.k_h, self.k_w);
        let served = if self.winograd {
            winograd::serves(g)
        } else if self.grouped {
            grouped::serves(g)
        } else {
            self.kind.serves(g)
        };
        if want != have || served.is_err() {
            return Err(bad(
                "w",
                format!(
                    "packed for {} (cout, cin/groups, groups, k_h, k_w) = {have:?}, the geometry has {want:?}",
                    self.layout_name()
                ),
            ));
        }
        Ok(())
    }

    /// Bias of channel `co` as packed.
    pub fn bias(&self, co: usize) -> f32 {
        let (p, lane) = self.slot(co);
        self.lines[p].0[lane]
    }

    /// The panel and lane of output channel `co` (module docs).
    fn slot(&self, co: usize) -> (usize, usize) {
        if self.winograd || self.grouped {
            (co / PANEL, co % PANEL)
        } else {
            slot_of(self.kind, self.cout, self.groups, co)
        }
    }

    /// Weight `(co, kh, kw, ci)` as packed (`ci` within the group). For
    /// the Winograd packing, `(kh, kw)` name the transformed position
    /// `ξ = 4 · kh + kw` (each 0–3) and the value is `U[ξ][ci][co]`.
    pub fn get(&self, co: usize, kh: usize, kw: usize, ci: usize) -> f32 {
        if self.winograd {
            let wp = winograd::wpanels(self.cout) as usize;
            let cin = self.cin_g as usize;
            let xi = 4 * kh + kw;
            let (p, h) = (co / 32, (co % 32) / PANEL);
            let line = 2 * wp + ((xi * wp + p) * cin + ci) * 2 + h;
            return self.lines[line].0[co % PANEL];
        }
        if self.grouped {
            let panels = (self.cout as usize).div_ceil(PANEL);
            let (taps, cin_g) = ((self.k_h * self.k_w) as usize, self.cin_g as usize);
            let t = kh * self.k_w as usize + kw;
            let line = panels + ((co / PANEL) * taps + t) * cin_g + ci;
            return self.lines[line].0[co % PANEL];
        }
        let panels = match self.kind {
            ArmKind::Direct => {
                let cout_g = (self.cout / self.groups.max(1)) as usize;
                self.groups as usize * cout_g.div_ceil(PANEL)
            }
            ArmKind::Depthwise => (self.cout as usize).div_ceil(PANEL),
        };
        let (taps, cin_g) = ((self.k_h * self.k_w) as usize, self.cin_g as usize);
        let t = kh * self.k_w as usize + kw;
        let (p, lane) = self.slot(co);
        let line = match self.kind {
            ArmKind::Direct => panels + p * taps * cin_g + t * cin_g + ci,
            ArmKind::Depthwise => panels + p * taps + t,
        };
        self.lines[line].0[lane]
    }

    /// The first element (what a body's `filt` points at).
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

    /// As an offer's packed operand `w`.
    pub fn operand(&self) -> PackedOperand {
        PackedOperand {
            name: "w",
            layout: self.layout_name(),
            bytes: Arc::from(self.to_bytes()),
        }
    }

    /// Back from a compiled site's packed operand `w` for `g` (copied into
    /// aligned storage). A missing operand, another layout or another
    /// length is `bad-operand`.
    pub fn from_site(
        op: Option<&PackedOperand>,
        g: &ConvGeometry,
    ) -> Result<PackedFilter, Refusal> {
        let op = op.ok_or_else(|| bad("w", "the site packed no filter".to_owned()))?;
        let kind = match op.layout {
            WINOGRAD_LAYOUT => {
                winograd::serves(g)?;
                g.check()?;
                let want = Self::winograd_lines(g) * 64;
                if op.bytes.len() != want {
                    return Err(bad(
                        "w",
                        format!("{} bytes, {g:?} packed is {want}", op.bytes.len()),
                    ));
                }
                return Ok(PackedFilter {
                    kind: ArmKind::Direct,
                    winograd: true,
                    grouped: false,
                    lines: lines_of(&op.bytes),
                    cout: g.cout,
                    cin_g: g.cin,
                    groups: 1,
                    k_h: g.k_h,
                    k_w: g.k_w,
                });
            }
            GROUPED_LAYOUT => {
                grouped::serves(g)?;
                g.check()?;
                let want = Self::grouped_lines(g) * 64;
                if op.bytes.len() != want {
                    return Err(bad(
                        "w",
                        format!("{} bytes, {g:?} packed is {want}", op.bytes.len()),
                    ));
                }
                return Ok(PackedFilter {
                    kind: ArmKind::Direct,
                    winograd: false,
                    grouped: true,
                    lines: lines_of(&op.bytes),
                    cout: g.cout,
                    cin_g: g.cin / g.groups,
                    groups: g.groups,
                    k_h: g.k_h,
                    k_w: g.k_w,
                });
            }
            DIRECT_LAYOUT => ArmKind::Direct,
            DEPTHWISE_LAYOUT => ArmKind::Depthwise,
            other => return Err(bad("w", format!("unknown layout {other}"))),
        };
        kind.serves(g)?;
        let shape = g.check()?;
        let taps = (g.k_h * g.k_w) as usize;
        let cin_g = (g.cin / g.groups) as usize;
        let per_panel = match kind {
            ArmKind::Direct => taps * cin_g,
            ArmKind::Depthwise => taps,
        };
        let want = shape.panels as usize * (1 + per_panel) * 64;
        if op.bytes.len() != want {
            return Err(bad(
                "w",
                format!("{} bytes, {g:?} packed is {want}", op.bytes.len()),
            ));
        }
        Ok(PackedFilter {
            kind,
            winograd: false,
            grouped: false,
            lines: lines_of(&op.bytes),
            cout: g.cout,
            cin_g: cin_g as u64,
            groups: g.groups,
            k_h: g.k_h,
            k_w: g.k_w,
        })
    }
}

/// The panel and lane of output channel `co` in `kind`'s layout for
/// `cout` channels in `groups` groups (module docs); a `co` past `cout`
/// names a padding lane of the last group's panels (as at `groups = 1`).
fn slot_of(kind: ArmKind, cout: u64, groups: u64, co: usize) -> (usize, usize) {
    match kind {
        ArmKind::Direct => {
            let cout_g = (cout / groups.max(1)).max(1) as usize;
            // Channels past cout: the last group's padding lanes.
            let g = (co / cout_g).min(groups.max(1) as usize - 1);
            let j = co - g * cout_g;
            (g * cout_g.div_ceil(PANEL) + j / PANEL, j % PANEL)
        }
        ArmKind::Depthwise => (co / PANEL, co % PANEL),
    }
}

/// 64-byte lines from little-endian bytes (a whole number of lines).
pub(crate) fn lines_of(bytes: &[u8]) -> Vec<Line> {
    bytes
        .chunks_exact(64)
        .map(|c| {
            let mut l = [0.0f32; PANEL];
            for (slot, w) in l.iter_mut().zip(c.chunks_exact(4)) {
                *slot = f32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            }
            Line(l)
        })
        .collect()
}
