//! Bench results kept on disk for `cargo xtask roofline`: each bench that
//! places kernels on the roofline writes its one-thread points to
//! `<target>/bench-results/<bench>.json`, replacing its previous run's.
//!
//! A point is one candidate at one shape: the work it does (flops, or int8
//! ops counted as 2 per multiply-add), the bytes it must read at least
//! once, and its median seconds per call, with the host that measured it
//! (the roofline refuses another host's points: the roofs are this host's).

use std::path::PathBuf;

use serde_json::{json, Value};

/// Which roof a point is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// f32 multiply-adds: the FMA peak.
    F32,
    /// int8 multiply-adds: the int8 peak.
    Int8,
}

impl Arith {
    fn tag(self) -> &'static str {
        match self {
            Arith::F32 => "f32",
            Arith::Int8 => "int8",
        }
    }
}

/// One candidate at one shape, one thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    /// The kernel family (`q8_0.matvec`, `attention.fused`).
    pub family: String,
    /// The candidate (`q8_0.matvec.avx2`, `… arm`).
    pub candidate: String,
    /// `arm`, `twin` or `chain`.
    pub kind: String,
    /// The shape, as the bench's table names it.
    pub shape: String,
    pub arith: Arith,
    pub work: f64,
    pub bytes: f64,
    pub secs: f64,
}

/// The directory the results live in (`$CARGO_TARGET_DIR` or the
/// workspace's `target/`).
fn dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"))
        .join("bench-results")
}

/// Write `bench`'s points measured on `host` (its model string).
pub fn save(bench: &str, host: &str, points: &[Point]) -> Result<PathBuf, String> {
    let dir = dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{bench}.json"));
    let points: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "family": p.family, "candidate": p.candidate, "kind": p.kind,
                "shape": p.shape, "arith": p.arith.tag(), "work": p.work,
                "bytes": p.bytes, "secs": p.secs,
            })
        })
        .collect();
    let doc = json!({ "bench": bench, "host": host, "points": points });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Every bench's saved points: `(bench, host, points)`, sorted by bench.
pub fn load_all() -> Result<Vec<(String, String, Vec<Point>)>, String> {
    let dir = dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for e in entries {
        let path = e.map_err(|e| e.to_string())?.path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        out.push(parse(&text).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// One results file.
fn parse(text: &str) -> Result<(String, String, Vec<Point>), String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let s = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("no string `{k}`"))
    };
    let f = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_f64)
            .ok_or_else(|| format!("no number `{k}`"))
    };
    let points = v
        .get("points")
        .and_then(Value::as_array)
        .ok_or("no `points` list")?
        .iter()
        .map(|p| {
            Ok(Point {
                family: s(p, "family")?,
                candidate: s(p, "candidate")?,
                kind: s(p, "kind")?,
                shape: s(p, "shape")?,
                arith: match s(p, "arith")?.as_str() {
                    "f32" => Arith::F32,
                    "int8" => Arith::Int8,
                    other => return Err(format!("unknown arith `{other}`")),
                },
                work: f(p, "work")?,
                bytes: f(p, "bytes")?,
                secs: f(p, "secs")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok((s(&v, "bench")?, s(&v, "host")?, points))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_file_parses_back_to_the_same_points() {
        let p = Point {
            family: "q8_0.matvec".into(),
            candidate: "arm".into(),
            kind: "arm".into(),
            shape: "576×576 batch 1".into(),
            arith: Arith::Int8,
            work: 663552.0,
            bytes: 352512.0,
            secs: 1.5e-5,
        };
        let doc = json!({
            "bench": "q8-matvec", "host": "AMD EPYC",
            "points": [{
                "family": p.family, "candidate": p.candidate, "kind": p.kind,
                "shape": p.shape, "arith": "int8", "work": p.work,
                "bytes": p.bytes, "secs": p.secs,
            }],
        });
        let (bench, host, points) = parse(&doc.to_string()).expect("parses");
        assert_eq!((bench.as_str(), host.as_str()), ("q8-matvec", "AMD EPYC"));
        assert_eq!(points, [p]);
        assert!(parse("{\"bench\": 1}").is_err());
        assert!(parse(&doc.to_string().replace("int8", "int4")).is_err());
    }
}
