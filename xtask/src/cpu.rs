//! This CPU's identity from CPUID: vendor, display family and model, the
//! names figures and roofline files carry (`family25-model17`), as Linux's
//! `/proc/cpuinfo` shows them.

/// Display family and model from CPUID leaf 1's EAX, the extended fields
/// folded in as the vendors' manuals (and `/proc/cpuinfo`) do.
pub fn family_model(eax: u32) -> (u32, u32) {
    let base_family = (eax >> 8) & 0xf;
    let base_model = (eax >> 4) & 0xf;
    let family = if base_family == 0xf {
        base_family + ((eax >> 20) & 0xff)
    } else {
        base_family
    };
    let model = if base_family == 0x6 || base_family == 0xf {
        (((eax >> 16) & 0xf) << 4) | base_model
    } else {
        base_model
    };
    (family, model)
}

/// This CPU's CPUID vendor string, display family and model.
pub fn identity() -> (String, u32, u32) {
    use std::arch::x86_64::__cpuid;
    // CPUID exists on every x86-64 CPU; std's intrinsic is safe to call.
    let l0 = __cpuid(0);
    let vendor: String = [l0.ebx, l0.edx, l0.ecx]
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .map(char::from)
        .collect();
    let (family, model) = family_model(__cpuid(1).eax);
    (vendor, family, model)
}

/// `family25-model17`: the name a host's files are filed under.
pub fn slug() -> String {
    let (_, family, model) = identity();
    format!("family{family}-model{model}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_leaf_one_folds_the_extended_family_and_model_in() {
        assert_eq!(family_model(0x00a1_0f11), (25, 17)); // Genoa, 19h/11h
        assert_eq!(family_model(0x00b0_0f20), (26, 2)); // Turin, 1Ah/02h
        assert_eq!(family_model(0x000a_0671), (6, 167)); // Intel 06h/A7h
    }
}
