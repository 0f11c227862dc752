//! Port tables: per microarchitecture, what each instruction class costs
//! (µops, latency, which ports for how many cycles), the core's issue
//! width, load latencies, and the roofline's peak and bandwidths — as data,
//! one text file per core under `src/tables/`, every entry with a source.
//!
//! # Format
//!
//! One statement a line; `#` starts a comment; a statement that carries data
//! ends with `; TAG note…`, where `TAG` is declared by a `source` line.
//!
//! ```text
//! table zen4 "AMD Zen 4"                    id and title
//! isa x86_64                                x86_64 | aarch64
//! match vendor=AuthenticAMD has=avx512f lacks=avxvnni model~EPYC
//! source llvm "LLVM X86ScheduleZnver4.td"   a citation for TAG `llvm`
//! ports ALU0 ALU1 FP0 FP1 …                 the execution ports
//! issue 6 ; TAG …                           macro-ops dispatched per cycle
//! window 320 ; TAG …                        macro-ops the reorder buffer holds
//! scheduler 67 ; TAG …                      µops waiting ahead of a chain
//!                                           (optional)
//! load-latency gpr=4 vec=7 ; TAG …          load-to-use cycles
//! store-forward gpr=1 vec=17 partial=16 ; TAG   store data to load result
//!                                           through memory (same bytes,
//!                                           vector, part of a wider store)
//! peak-flops f32=32 f64=16 ; TAG …          per cycle, one core
//! bandwidth l1=64 l2=32 l3=16 dram=8 ; TAG  bytes per cycle, one core
//! caches l1d=32768 l2=1048576 l3=33554432 ; TAG   sizes when the host does not say
//! row fp.add y uops=1 lat=3 use=FP2|FP3 ; TAG …
//! row vec.load z uops=1 lat=8 use=AGU0|AGU1|AGU2+V0|V1*2 ; TAG …
//! ```
//!
//! In `use=`, `A|B` is a set of ports any one of which can take the µop,
//! `*n` is how many cycles it keeps that port busy (default 1), `+` joins
//! the sets one instruction needs, and `-` means no port (renamed moves,
//! zero idioms). A row is one [`Class`] at one [`Width`].

use std::sync::OnceLock;

use weft_kernel::{Feature, Host, Isa};

use crate::class::{Class, Width};

/// The tables shipped with the crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TableId {
    /// AMD Zen 4 (family 19h models 10h–1Fh: EPYC 9004 "Genoa"; this
    /// project's development machine). Checked by `cargo xtask cost-calibrate`.
    Zen4,
    /// Intel Golden Cove (Sapphire Rapids server core, Alder Lake P-core).
    GoldenCove,
    /// AMD Zen 5 (family 1Ah: EPYC 9005 "Turin"), drafted from Zen 4 and
    /// corrected by `cargo xtask cost-calibrate` on a Zen 5 machine.
    Zen5,
    /// Arm Neoverse V2 (AWS Graviton4, NVIDIA Grace).
    NeoverseV2,
}

impl TableId {
    /// Every shipped table.
    pub const ALL: [TableId; 4] = [
        TableId::Zen4,
        TableId::GoldenCove,
        TableId::Zen5,
        TableId::NeoverseV2,
    ];

    /// The table's text.
    pub fn text(self) -> &'static str {
        match self {
            TableId::Zen4 => include_str!("tables/zen4.table"),
            TableId::GoldenCove => include_str!("tables/golden_cove.table"),
            TableId::Zen5 => include_str!("tables/zen5.table"),
            TableId::NeoverseV2 => include_str!("tables/neoverse_v2.table"),
        }
    }

    /// The parsed table (parsed once per process).
    pub fn table(self) -> &'static PortTable {
        static TABLES: OnceLock<Vec<PortTable>> = OnceLock::new();
        let all = TABLES.get_or_init(|| {
            TableId::ALL
                .iter()
                .map(|id| {
                    // The shipped tables are tested to parse; a failure here
                    // is a build defect, reported with its line.
                    PortTable::parse(id.text())
                        .unwrap_or_else(|e| panic!("shipped table {id:?} does not parse: {e}"))
                })
                .collect()
        });
        &all[TableId::ALL.iter().position(|t| *t == self).unwrap_or(0)]
    }

    /// The shipped table whose `match` line fits `host`, if any.
    pub fn for_host(host: &Host) -> Option<TableId> {
        TableId::ALL.into_iter().find(|id| id.table().matches(host))
    }

    /// The CPU `cargo xtask cost-calibrate` measured this table's
    /// measured rows (tag `weft-mb`) on, as the table's header comment
    /// names it; `None` for a table no machine of ours measured (every row
    /// from LLVM or a vendor's manual). Kept here, beside the tables, so a
    /// run on another CPU can say it is not the one the table was fitted
    /// to; change it only with a re-calibration.
    pub fn calibrated_on(self) -> Option<CalibrationHost> {
        match self {
            // zen4.table: "the development machine (EPYC, family 19h model 11h)".
            TableId::Zen4 => Some(CalibrationHost {
                vendor: "AuthenticAMD",
                family: 0x19,
                model: 0x11,
            }),
            // zen5.table: "a Zen 5 EPYC (family 1Ah model 02h, a 2-vCPU guest)".
            TableId::Zen5 => Some(CalibrationHost {
                vendor: "AuthenticAMD",
                family: 0x1a,
                model: 0x02,
            }),
            TableId::GoldenCove | TableId::NeoverseV2 => None,
        }
    }
}

/// A CPU as CPUID names it: vendor string, family and model (the extended
/// fields folded in, as Linux's `/proc/cpuinfo` shows them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CalibrationHost {
    /// `"AuthenticAMD"`, `"GenuineIntel"`.
    pub vendor: &'static str,
    /// Display family.
    pub family: u32,
    /// Display model.
    pub model: u32,
}

/// One cited source.
#[derive(Clone, Debug, PartialEq)]
pub struct Source {
    /// The tag rows cite.
    pub tag: String,
    /// The citation.
    pub citation: String,
}

/// What one class costs at one width.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The class.
    pub class: Class,
    /// The width.
    pub width: Width,
    /// Micro-ops (macro-ops on AMD) it takes from the issue width.
    pub uops: f64,
    /// Cycles from its inputs to its result.
    pub latency: f64,
    /// Port sets (bit masks over [`PortTable::ports`]) and cycles on each.
    pub usage: Vec<(u32, f64)>,
    /// The source tag.
    pub source: String,
    /// Free text after the tag.
    pub note: String,
}

/// Which hosts a table is for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostMatch {
    /// The CPU vendor string it needs.
    pub vendor: Option<String>,
    /// A substring the model string must contain.
    pub model: Option<String>,
    /// Features the host must have.
    pub has: Vec<Feature>,
    /// Features the host must lack.
    pub lacks: Vec<Feature>,
}

/// Cache sizes in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheSizes {
    /// L1 data.
    pub l1d: u64,
    /// L2.
    pub l2: u64,
    /// L3.
    pub l3: u64,
}

/// A parsed port table.
#[derive(Clone, Debug, PartialEq)]
pub struct PortTable {
    /// Short id (`zen4`).
    pub id: String,
    /// Title.
    pub title: String,
    /// The ISA.
    pub isa: Isa,
    /// Which hosts it is for.
    pub host: HostMatch,
    /// Execution port names; bit `i` of a usage mask is `ports[i]`.
    pub ports: Vec<String>,
    /// Macro-ops dispatched per cycle.
    pub issue: f64,
    /// Macro-ops the reorder window holds (0 when the table does not say).
    pub window: f64,
    /// Waiting µops the schedulers hold ahead of a dependency chain (0 when
    /// the table does not say): how far the next iteration's work can
    /// start before the current chain drains.
    pub scheduler: f64,
    /// Load-to-use latency of a general-register load.
    pub load_latency_gpr: f64,
    /// Load-to-use latency of a vector load.
    pub load_latency_vec: f64,
    /// Store-to-load latency through memory (store data to load result),
    /// general registers, same bytes.
    pub forward_gpr: f64,
    /// The same for vector registers.
    pub forward_vec: f64,
    /// The same when the load reads part of a wider store.
    pub forward_partial: f64,
    /// Peak f32 floating-point operations per cycle (one core).
    pub peak_flops_f32: f64,
    /// Peak f64 floating-point operations per cycle (one core).
    pub peak_flops_f64: f64,
    /// Sustained bytes per cycle from L1, L2, L3, DRAM (one core).
    pub bandwidth: [f64; 4],
    /// Default cache sizes (used when the host does not report them).
    pub caches: CacheSizes,
    /// Rows, by class and width.
    pub rows: Vec<Row>,
    /// The sources cited.
    pub sources: Vec<Source>,
    /// Source tags of the table-wide statements (issue, latencies, roofline).
    pub statement_sources: Vec<(String, String)>,
}

/// Why a table does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("table-syntax: line {line}: {message}")]
pub struct TableError {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl PortTable {
    /// Parse a table's text.
    pub fn parse(text: &str) -> Result<PortTable, TableError> {
        let mut t = PortTable {
            id: String::new(),
            title: String::new(),
            isa: Isa::Other,
            host: HostMatch::default(),
            ports: Vec::new(),
            issue: 0.0,
            window: 0.0,
            scheduler: 0.0,
            load_latency_gpr: 0.0,
            load_latency_vec: 0.0,
            forward_gpr: 0.0,
            forward_vec: 0.0,
            forward_partial: 0.0,
            peak_flops_f32: 0.0,
            peak_flops_f64: 0.0,
            bandwidth: [0.0; 4],
            caches: CacheSizes {
                l1d: 0,
                l2: 0,
                l3: 0,
            },
            rows: Vec::new(),
            sources: Vec::new(),
            statement_sources: Vec::new(),
        };
        let mut cites: Vec<(usize, String)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |message: String| TableError { line, message };
            let code = raw.split('#').next().unwrap_or("").trim();
            if code.is_empty() {
                continue;
            }
            let (stmt, cite) = match code.split_once(';') {
                Some((s, c)) => (s.trim(), Some(c.trim())),
                None => (code, None),
            };
            let (tag, note) = match cite {
                Some(c) => {
                    let mut it = c.splitn(2, char::is_whitespace);
                    let tag = it.next().unwrap_or("").to_owned();
                    if tag.is_empty() {
                        return Err(err("`;` without a source tag".into()));
                    }
                    cites.push((line, tag.clone()));
                    (Some(tag), it.next().unwrap_or("").trim().to_owned())
                }
                None => (None, String::new()),
            };
            let mut words = stmt.split_whitespace();
            let keyword = words.next().unwrap_or("");
            let rest: Vec<&str> = words.collect();
            let need_tag = || {
                tag.clone()
                    .ok_or_else(|| err(format!("`{keyword}` needs `; SOURCE`")))
            };
            match keyword {
                "table" => {
                    t.id = rest
                        .first()
                        .ok_or_else(|| err("table needs an id".into()))?
                        .to_string();
                    t.title =
                        quoted(stmt).ok_or_else(|| err("table needs a quoted title".into()))?;
                }
                "isa" => {
                    t.isa = match rest.first().copied() {
                        Some("x86_64") => Isa::X86_64,
                        Some("aarch64") => Isa::Aarch64,
                        other => return Err(err(format!("unknown isa {other:?}"))),
                    }
                }
                "match" => {
                    for w in &rest {
                        if let Some(v) = w.strip_prefix("vendor=") {
                            t.host.vendor = Some(v.to_owned());
                        } else if let Some(v) = w.strip_prefix("model~") {
                            t.host.model = Some(v.to_owned());
                        } else if let Some(v) = w.strip_prefix("has=") {
                            t.host.has.push(
                                Feature::from_name(v)
                                    .ok_or_else(|| err(format!("unknown feature {v}")))?,
                            );
                        } else if let Some(v) = w.strip_prefix("lacks=") {
                            t.host.lacks.push(
                                Feature::from_name(v)
                                    .ok_or_else(|| err(format!("unknown feature {v}")))?,
                            );
                        } else {
                            return Err(err(format!("unknown match term {w}")));
                        }
                    }
                }
                "source" => {
                    let tag = rest
                        .first()
                        .ok_or_else(|| err("source needs a tag".into()))?;
                    let citation =
                        quoted(stmt).ok_or_else(|| err("source needs a quoted citation".into()))?;
                    t.sources.push(Source {
                        tag: (*tag).to_owned(),
                        citation,
                    });
                }
                "ports" => {
                    if rest.is_empty() || rest.len() > 32 {
                        return Err(err("ports: 1 to 32 names".into()));
                    }
                    t.ports = rest.iter().map(|s| (*s).to_owned()).collect();
                }
                "issue" => {
                    t.issue = number(rest.first().copied()).ok_or_else(|| err("issue N".into()))?;
                    t.statement_sources.push(("issue".into(), need_tag()?));
                }
                "window" => {
                    t.window =
                        number(rest.first().copied()).ok_or_else(|| err("window N".into()))?;
                    t.statement_sources.push(("window".into(), need_tag()?));
                }
                "scheduler" => {
                    t.scheduler =
                        number(rest.first().copied()).ok_or_else(|| err("scheduler N".into()))?;
                    t.statement_sources.push(("scheduler".into(), need_tag()?));
                }
                "load-latency" | "store-forward" | "peak-flops" | "bandwidth" | "caches" => {
                    let kv = pairs(&rest).ok_or_else(|| err(format!("{keyword}: KEY=N …")))?;
                    let get = |k: &str| {
                        kv.iter()
                            .find(|(n, _)| n == k)
                            .map(|(_, v)| *v)
                            .ok_or_else(|| err(format!("{keyword} needs {k}=")))
                    };
                    match keyword {
                        "load-latency" => {
                            t.load_latency_gpr = get("gpr")?;
                            t.load_latency_vec = get("vec")?;
                        }
                        "store-forward" => {
                            t.forward_gpr = get("gpr")?;
                            t.forward_vec = get("vec")?;
                            t.forward_partial = get("partial")?;
                        }
                        "peak-flops" => {
                            t.peak_flops_f32 = get("f32")?;
                            t.peak_flops_f64 = get("f64")?;
                        }
                        "bandwidth" => {
                            t.bandwidth = [get("l1")?, get("l2")?, get("l3")?, get("dram")?];
                        }
                        _ => {
                            t.caches = CacheSizes {
                                l1d: get("l1d")? as u64,
                                l2: get("l2")? as u64,
                                l3: get("l3")? as u64,
                            };
                        }
                    }
                    t.statement_sources.push((keyword.into(), need_tag()?));
                }
                "row" => {
                    let source = need_tag()?;
                    let row = parse_row(&rest, &t.ports).map_err(&err)?;
                    if t.rows
                        .iter()
                        .any(|r| r.class == row.class && r.width == row.width)
                    {
                        return Err(err(format!(
                            "second row for {} {}",
                            row.class,
                            row.width.name()
                        )));
                    }
                    t.rows.push(Row {
                        source,
                        note: note.clone(),
                        ..row
                    });
                }
                other => return Err(err(format!("unknown statement `{other}`"))),
            }
        }
        let fail = |message: String| TableError { line: 0, message };
        for (line, tag) in cites {
            if !t.sources.iter().any(|s| s.tag == tag) {
                return Err(TableError {
                    line,
                    message: format!("source tag `{tag}` is not declared"),
                });
            }
        }
        if t.id.is_empty() || t.isa == Isa::Other || t.ports.is_empty() || t.issue <= 0.0 {
            return Err(fail(
                "a table needs `table`, `isa`, `ports` and `issue`".into(),
            ));
        }
        if t.forward_vec <= 0.0 {
            // Without a measurement, forwarding costs a load.
            t.forward_gpr = t.load_latency_gpr;
            t.forward_vec = t.load_latency_vec;
            t.forward_partial = t.load_latency_vec;
        }
        if t.peak_flops_f32 <= 0.0 || t.bandwidth.iter().any(|b| *b <= 0.0) || t.caches.l1d == 0 {
            return Err(fail(
                "a table needs `peak-flops`, `bandwidth` and `caches`".into(),
            ));
        }
        if !t.rows.iter().any(|r| r.class == Class::Unknown) {
            return Err(fail(
                "a table needs a conservative `row unknown` line".into(),
            ));
        }
        Ok(t)
    }

    /// Whether this table is for `host`.
    pub fn matches(&self, host: &Host) -> bool {
        host.isa == self.isa
            && self.host.vendor.as_ref().is_none_or(|v| *v == host.vendor)
            && self
                .host
                .model
                .as_ref()
                .is_none_or(|m| host.model.contains(m.as_str()))
            && self.host.has.iter().all(|f| host.has(*f))
            && !self.host.lacks.iter().any(|f| host.has(*f))
    }

    /// The row for `class` at `width`: the exact one, else the nearest
    /// wider, else the nearest narrower, else the `unknown` row.
    pub fn row(&self, class: Class, width: Width) -> &Row {
        let find = |w: Width| self.rows.iter().find(|r| r.class == class && r.width == w);
        if let Some(r) = find(width) {
            return r;
        }
        let wider = Width::ALL
            .iter()
            .filter(|w| **w > width)
            .find_map(|w| find(*w));
        let narrower = Width::ALL
            .iter()
            .rev()
            .filter(|w| **w < width)
            .find_map(|w| find(*w));
        wider.or(narrower).unwrap_or_else(|| self.unknown())
    }

    /// Whether the table has a row for exactly `class` at `width`.
    pub fn has_row(&self, class: Class, width: Width) -> bool {
        self.rows
            .iter()
            .any(|r| r.class == class && r.width == width)
    }

    /// The conservative row for instructions no class covers.
    pub fn unknown(&self) -> &Row {
        // `parse` refuses a table without one.
        self.rows
            .iter()
            .find(|r| r.class == Class::Unknown)
            .unwrap_or(&self.rows[0])
    }

    /// The citation of `tag`.
    pub fn citation(&self, tag: &str) -> Option<&str> {
        self.sources
            .iter()
            .find(|s| s.tag == tag)
            .map(|s| s.citation.as_str())
    }

    /// Reciprocal throughput of one row alone (cycles per instruction when
    /// independent instances run back to back): the busiest port set's
    /// cycles over its size, or the issue width.
    pub fn reciprocal_throughput(&self, row: &Row) -> f64 {
        let mut worst = row.uops / self.issue;
        for &(mask, cycles) in &row.usage {
            worst = worst.max(cycles / f64::from(mask.count_ones()));
        }
        worst
    }
}

fn quoted(s: &str) -> Option<String> {
    let a = s.find('"')?;
    let b = s[a + 1..].find('"')?;
    Some(s[a + 1..a + 1 + b].to_owned())
}

fn number(s: Option<&str>) -> Option<f64> {
    s?.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

fn pairs(words: &[&str]) -> Option<Vec<(String, f64)>> {
    words
        .iter()
        .map(|w| {
            let (k, v) = w.split_once('=')?;
            Some((k.to_owned(), number(Some(v))?))
        })
        .collect()
}

fn parse_row(words: &[&str], ports: &[String]) -> Result<Row, String> {
    let [class, width, rest @ ..] = words else {
        return Err("row CLASS WIDTH uops=N lat=N use=PORTS".into());
    };
    let class = Class::from_name(class).ok_or_else(|| format!("unknown class {class}"))?;
    let width = Width::from_name(width).ok_or_else(|| format!("unknown width {width}"))?;
    let mut uops = None;
    let mut latency = None;
    let mut usage = None;
    for w in rest {
        if let Some(v) = w.strip_prefix("uops=") {
            uops = number(Some(v));
        } else if let Some(v) = w.strip_prefix("lat=") {
            latency = number(Some(v));
        } else if let Some(v) = w.strip_prefix("use=") {
            usage = Some(parse_usage(v, ports)?);
        } else {
            return Err(format!("unknown row field {w}"));
        }
    }
    Ok(Row {
        class,
        width,
        uops: uops.ok_or("row needs uops=")?,
        latency: latency.ok_or("row needs lat=")?,
        usage: usage.ok_or("row needs use=")?,
        source: String::new(),
        note: String::new(),
    })
}

fn parse_usage(text: &str, ports: &[String]) -> Result<Vec<(u32, f64)>, String> {
    if text == "-" {
        return Ok(Vec::new());
    }
    text.split('+')
        .map(|part| {
            let (set, cycles) = match part.split_once('*') {
                Some((s, c)) => (s, number(Some(c)).ok_or(format!("bad cycles in {part}"))?),
                None => (part, 1.0),
            };
            let mut mask = 0u32;
            for name in set.split('|') {
                let i = ports
                    .iter()
                    .position(|p| p == name)
                    .ok_or(format!("unknown port {name}"))?;
                mask |= 1 << i;
            }
            Ok((mask, cycles))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calibration_host_is_the_one_its_tables_header_names() {
        for id in TableId::ALL {
            let Some(c) = id.calibrated_on() else {
                continue;
            };
            let named = format!("family {:02x}h model {:02x}h", c.family, c.model);
            assert!(
                id.text().to_lowercase().contains(&named),
                "{id:?}: the header does not name {named}"
            );
        }
    }

    #[test]
    fn every_shipped_table_parses_and_cites_declared_sources() {
        for id in TableId::ALL {
            let t = PortTable::parse(id.text()).unwrap_or_else(|e| panic!("{id:?}: {e}"));
            assert!(!t.rows.is_empty(), "{id:?} has rows");
            for r in &t.rows {
                assert!(
                    t.citation(&r.source).is_some(),
                    "{id:?} {} {} cites an undeclared source",
                    r.class,
                    r.width.name()
                );
            }
            for (what, tag) in &t.statement_sources {
                assert!(t.citation(tag).is_some(), "{id:?} {what} cites {tag}");
            }
        }
    }

    #[test]
    fn zen4_and_zen5_hosts_each_find_their_own_table() {
        use weft_kernel::Features;
        let avx512 = [
            Feature::Avx2,
            Feature::Fma,
            Feature::F16c,
            Feature::Avx512f,
            Feature::Avx512bw,
            Feature::Avx512vl,
            Feature::Avx512vnni,
            Feature::Avx512bf16,
        ]
        .into_iter()
        .fold(Features::EMPTY, Features::with);
        let mut host = Host::detect();
        host.isa = Isa::X86_64;
        host.vendor = "AuthenticAMD".into();
        host.model = "AMD EPYC".into();
        host.features = avx512;
        assert_eq!(TableId::for_host(&host), Some(TableId::Zen4));
        // Zen 5 adds the VEX form of VNNI, which Zen 4 lacks.
        host.features = avx512.with(Feature::AvxVnni);
        assert_eq!(TableId::for_host(&host), Some(TableId::Zen5));
        host.vendor = "GenuineIntel".into();
        assert_ne!(TableId::for_host(&host), Some(TableId::Zen5));
    }

    #[test]
    fn a_row_without_a_source_is_refused_by_line() {
        let text = "table t \"T\"\nisa x86_64\nports P0\nrow fp.add x uops=1 lat=3 use=P0\n";
        let e = PortTable::parse(text).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.to_string().starts_with("table-syntax"));
    }

    #[test]
    fn an_undeclared_source_tag_is_refused() {
        let text =
            "table t \"T\"\nisa x86_64\nports P0\nrow fp.add x uops=1 lat=3 use=P0 ; nowhere\n";
        let e = PortTable::parse(text).unwrap_err();
        assert!(e.message.contains("nowhere"), "{e}");
    }

    #[test]
    fn usage_parses_sets_cycles_and_joins() {
        let ports: Vec<String> = ["A", "B", "C"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            parse_usage("A|B*2+C", &ports).unwrap(),
            vec![(0b011, 2.0), (0b100, 1.0)]
        );
        assert_eq!(parse_usage("-", &ports).unwrap(), vec![]);
        assert!(parse_usage("D", &ports).is_err());
    }
}
