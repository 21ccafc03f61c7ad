// SPDX-License-Identifier: Apache-2.0
//! What the integration tests share.

use kvkey::{Dtype, Identity};

/// A small valid identity: tenant "t", model "m" at revision "r", fp16, 16-token
/// blocks, 4 layers of 4 KV heads of 8, layout "l".
pub fn valid_identity() -> Identity {
    Identity {
        tenant: "t".into(),
        model: kvkey::Model { name: "m".into(), revision: "r".into(), ..Default::default() },
        kv: kvkey::Kv {
            dtype: Some(Dtype::Fp16),
            block_size: 16,
            num_layers: 4,
            num_kv_heads: 4,
            head_dim: 8,
            layout: "l".into(),
            ..Default::default()
        },
        ..Default::default()
    }
}
