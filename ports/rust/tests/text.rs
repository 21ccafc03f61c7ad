// SPDX-License-Identifier: Apache-2.0
//! Names refuse exactly the code points the C++ library's
//! kvkey::is_unsafe_code_point refuses: every range, to its ends.

use kvkey::{Adapter, Identity, Namespace};

/// The ends of every unsafe range (and a few inside).
const UNSAFE: &[u32] = &[
    0x00, 0x09, 0x1f, 0x7f, 0x80, 0x85, 0x9f, 0x061c, 0x200b, 0x200d, 0x200f, 0x2028, 0x202a, 0x202e, 0x2060, 0x2066,
    0x2069, 0x206f, 0xfeff, 0xfff9, 0xfffa, 0xfffb,
];
/// One step outside each unsafe range: names may hold these.
const SAFE_NEIGHBOURS: &[u32] = &[
    0x20, 0x7e, 0xa0, 0x061b, 0x061d, 0x200a, 0x2010, 0x2027, 0x202f, 0x205f, 0x2070, 0xfefe, 0xff00, 0xfff8, 0xfffc,
    0x1f999,
];

mod common;

fn identity(model: &str, adapter: &str) -> Identity {
    let mut id = common::valid_identity();
    id.model.name = model.into();
    id.adapter = Some(Adapter { name: adapter.into(), ..Default::default() });
    id
}

fn with(cp: u32) -> String {
    format!("a{}b", char::from_u32(cp).unwrap())
}

#[test]
fn names_refuse_unsafe_code_points() {
    for &cp in UNSAFE {
        for (field, id) in [("model.name", identity(&with(cp), "x")), ("adapter.name", identity("m", &with(cp)))] {
            let e = Namespace::new(&id).err().unwrap_or_else(|| panic!("{} with U+{:04X} accepted", field, cp));
            assert_eq!((e.kind(), e.field()), ("identity_error", field), "U+{:04X}", cp);
        }
    }
}

#[test]
fn names_take_the_neighbours_of_unsafe_ranges() {
    for &cp in SAFE_NEIGHBOURS {
        let name = with(cp);
        if let Err(e) = Namespace::new(&identity(&name, &name)) {
            panic!("U+{:04X}: {}", cp, e);
        }
    }
}
