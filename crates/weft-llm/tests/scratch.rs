#[test]
fn scratch_reference_magnitudes() {
    let c = weft_llm::Config::smollm2_135m();
    let t = std::time::Instant::now();
    let w = weft_llm::synthetic::weights(&c);
    eprintln!("synth {:?}", t.elapsed());
    w.check().unwrap();
    let mut r = weft_llm::reference::Reference::new(&w);
    let mut tok = 1u32;
    for _ in 0..4 {
        let t = std::time::Instant::now();
        let l = r.step(tok);
        let max = l.iter().cloned().fold(f32::MIN, f32::max);
        let arg = l.iter().position(|v| *v == max).unwrap();
        let rms = (l.iter().map(|v| v*v).sum::<f32>() / l.len() as f32).sqrt();
        eprintln!("step {:?} max {max} at {arg} rms {rms}", t.elapsed());
        tok = arg as u32;
    }
}
