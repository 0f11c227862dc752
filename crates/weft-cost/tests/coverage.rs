//! Every instruction the families' arms and twins contain has a class, and
//! every table of its ISA has a row for exactly that class and width (no
//! silent fallback to a neighbouring width), so real kernels are priced
//! from rows that were written for them.

use weft_cost::{classify, Class, TableId};
use weft_elementwise::arm::ElementwiseArm;
use weft_elementwise::Func;
use weft_kernel::{Arm, Family, Geometry, Host, Isa, NativeCode, Site, Twin};
use weft_q8::arm::Q8MatvecArm;
use weft_q8::twin_x64::TWINS;

/// Every body of both families, for `isa`, with its name.
fn bodies(isa: Isa) -> Vec<(String, NativeCode)> {
    let host = Host::detect();
    let mut out = Vec::new();
    let q8 = Q8MatvecArm;
    let site = Site::new(
        Family("q8_0.matvec"),
        Geometry::new()
            .with("rows", 8)
            .with("cols", 256)
            .with("batch", 1),
    );
    let offer = q8.offer(&site, &host).unwrap();
    // An arm built for the other ISA targets that ISA's baseline, where
    // Cranelift may need a libcall (a relocation: refused by name); such a
    // body cannot exist, so there is nothing to classify.
    let arm_body = |out: &mut Vec<(String, NativeCode)>,
                    name: &str,
                    built: Result<NativeCode, weft_kernel::Refusal>| match built
    {
        Ok(code) => out.push((name.to_owned(), code)),
        Err(e) if isa != host.isa && e.name() == "compile-error" => {
            eprintln!("{name}: not built for the other ISA's baseline: {e}")
        }
        Err(e) => panic!("{name}: {e}"),
    };
    arm_body(&mut out, q8.name(), q8.build(&offer, isa));
    if isa == Isa::X86_64 {
        for t in TWINS {
            out.push((t.name().to_owned(), t.emit(&offer).unwrap()));
        }
    }
    for func in Func::ALL {
        let arm = ElementwiseArm::new(func);
        let site = Site::new(arm.family(), Geometry::new().with("len", 100));
        let offer = arm.offer(&site, &host).unwrap();
        arm_body(&mut out, arm.name(), arm.build(&offer, isa));
        for t in weft_elementwise::twins_of(func) {
            if t.isa() == isa {
                out.push((t.name().to_owned(), t.emit(&offer).unwrap()));
            }
        }
    }
    out
}

#[test]
fn every_x64_instruction_of_the_families_has_a_class_and_a_row_in_every_x64_table() {
    for (name, code) in bodies(Isa::X86_64) {
        for i in classify(&code).unwrap() {
            let bytes = &code.bytes[i.offset..(i.offset + 12).min(code.bytes.len())];
            assert_ne!(
                i.class,
                Class::Unknown,
                "{name} at {:#x}: {bytes:02x?}",
                i.offset
            );
            for id in TableId::ALL
                .into_iter()
                .filter(|id| id.table().isa == Isa::X86_64)
            {
                assert!(
                    id.table().has_row(i.class, i.width),
                    "{id:?} has no row {} {} ({name} at {:#x})",
                    i.class,
                    i.width.name(),
                    i.offset
                );
            }
        }
    }
}

#[test]
fn every_known_a64_instruction_of_the_families_has_a_row_in_the_a64_table() {
    let table = TableId::NeoverseV2.table();
    let mut unknown = 0;
    for (name, code) in bodies(Isa::Aarch64) {
        for i in classify(&code).unwrap() {
            if !i.known || i.class == Class::Unknown {
                unknown += 1;
                continue;
            }
            assert!(
                table.has_row(i.class, i.width),
                "neoverse-v2 has no row {} {} ({name} at {:#x})",
                i.class,
                i.width.name(),
                i.offset
            );
        }
    }
    // Cranelift's arm64 arms use a few words outside weft-a64's table
    // (umaxp for "any lane"): priced conservatively, and few.
    assert!(unknown <= 8, "{unknown} unknown arm64 instructions");
}
