// SPDX-License-Identifier: Apache-2.0
// The umbrella header: everything but the opt-in fmt formatters (kvkey/fmt.hpp)
// and the legacy compatibility modules (kvkey/compat/).
#ifndef KVKEY_KVKEY_HPP
#define KVKEY_KVKEY_HPP

#include "kvkey/config.hpp"
#include "kvkey/digest.hpp"
#include "kvkey/encode.hpp"
#include "kvkey/envelope.hpp"
#include "kvkey/errors.hpp"
#include "kvkey/fingerprint.hpp"
#include "kvkey/geometry.hpp"
#include "kvkey/hmac.hpp"
#include "kvkey/identity.hpp"
#include "kvkey/key_namespace.hpp"
#include "kvkey/metrics.hpp"
#include "kvkey/payload.hpp"
#include "kvkey/prefix.hpp"
#include "kvkey/sha256.hpp"

#endif  // KVKEY_KVKEY_HPP
