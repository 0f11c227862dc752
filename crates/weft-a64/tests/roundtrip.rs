//! Property tests: over random valid instructions of every form, decode is
//! the inverse of encode and the text survives the trip; over arbitrary
//! words, decode never panics and only claims words it can re-encode.

use proptest::prelude::*;
use weft_a64::sample::{random_inst, SplitMix64};
use weft_a64::{decode, FORMS};

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn decode_of_encode_is_the_identity(seed in any::<u64>()) {
        let inst = random_inst(&mut SplitMix64(seed));
        let word = inst.encode().unwrap();
        let back = decode(word);
        prop_assert_eq!(back, Some(inst), "{} = {:#010x}", inst, word);
    }

    #[test]
    fn display_is_stable_through_decode(seed in any::<u64>()) {
        let inst = random_inst(&mut SplitMix64(seed));
        let word = inst.encode().unwrap();
        let back = decode(word).unwrap();
        prop_assert_eq!(back.to_string(), inst.to_string());
        prop_assert_eq!(decode(back.encode().unwrap()).unwrap().to_string(), inst.to_string());
    }

    #[test]
    fn decode_never_panics_and_claims_only_what_it_re_encodes(word in any::<u32>()) {
        if let Some(i) = decode(word) {
            prop_assert_eq!(i.encode(), Ok(word), "{}", i);
        }
    }
}

#[test]
fn every_form_yields_valid_samples_that_round_trip() {
    let mut rng = SplitMix64(7);
    for form in FORMS {
        let cases = weft_a64::sample::cases(form, &mut rng, 2);
        assert!(!cases.is_empty(), "{} has no valid samples", form.name);
        for i in cases {
            let w = i.encode().unwrap();
            assert_eq!(decode(w), Some(i), "{} {i} {w:#010x}", form.name);
        }
    }
}

#[test]
fn decode_sweep_of_words_with_low_bits_varied_never_panics() {
    // Every top-11-bit opcode class with several field patterns.
    for hi in 0..(1u32 << 11) {
        for lo in [
            0u32, 0x1f_ffff, 0x15_5555, 0x0a_aaaa, 0x1f, 0x3e0, 0x1f_0000,
        ] {
            let w = hi << 21 | lo;
            if let Some(i) = decode(w) {
                assert_eq!(i.encode(), Ok(w), "{i}");
            }
        }
    }
}
