// SPDX-License-Identifier: Apache-2.0
// The identity schema as data (`kvkey schema`, tests/vectors/identity-schema.json;
// docs/conformance.md, "The identity schema").
#ifndef KVKEY_TOOL_SCHEMA_HPP
#define KVKEY_TOOL_SCHEMA_HPP

#include "cli/inputs.hpp"

namespace kvkey_tool {

/// The identity schema: every field of kvkey::Fields (path, key, type, limits,
/// default, rule, presence in identity files), the dtypes, the unsafe code
/// points, and the validation order of kvkey::validated.
Json identity_schema();

}  // namespace kvkey_tool

#endif  // KVKEY_TOOL_SCHEMA_HPP
