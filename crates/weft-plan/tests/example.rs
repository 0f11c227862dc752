//! The library example (`examples/matvec.rs`) runs in CI: this test
//! compiles the same file and calls its `run` (so the code a downstream
//! reader copies is the code that is tested), with a cache in a temporary
//! directory.

#[path = "../examples/matvec.rs"]
mod matvec;

use weft_plan::{CacheLocation, Options};

fn options(dir: &tempfile::TempDir) -> Options {
    Options {
        cache: CacheLocation::File(dir.path().join("plan.bin")),
        ..Options::default()
    }
}

#[test]
fn example_plans_runs_and_matches_the_scalar_references_on_one_and_two_threads() {
    // Small enough for a debug build under qemu; batch 2 and a row count
    // that is not a multiple of any unroll.
    let shape = (75, 96, 2);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut outputs = Vec::new();
    // The second run reads the first one's verdicts, races and bodies.
    for threads in [1, 2] {
        let mut text = Vec::new();
        let outcome = matvec::run(options(&dir), shape, threads, &mut text)
            .unwrap_or_else(|e| panic!("example failed on {threads} thread(s): {e}"));
        let text = String::from_utf8(text).expect("utf-8");
        // The report names both sites and their choices.
        assert!(text.contains("q8_0.quantize"), "{text}");
        assert!(text.contains("q8_0.matvec"), "{text}");
        assert!(
            text.contains(&format!("chose {}", outcome.matvec.0)),
            "{text}"
        );
        assert!(text.contains("bit for bit"), "{text}");
        assert_eq!(outcome.y.len(), shape.0 * shape.2);
        // The right product was computed: quantising uniform inputs to 8
        // bits moves each dot product by a random walk of rounding errors,
        // far below 1% of Σ|w·x|; a wrong row or scale is off by O(1).
        assert!(outcome.quantisation_error < 0.01, "{outcome:?}");
        outputs.push(outcome.y);
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&outputs[0]), bits(&outputs[1]));
}

#[test]
fn example_kill_switch_runs_the_arms_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = Options {
        mode: weft_plan::EmitMode::Off,
        ..options(&dir)
    };
    let outcome = matvec::run(options, (40, 64, 1), 2, &mut Vec::new()).expect("example");
    assert!(!outcome.matvec.1 && !outcome.quantize.1, "{outcome:?}");
}
