#!/usr/bin/env bash
# The quick soak (scripts/soak.sh --quick, bench/soak/): the same engine-shaped
# traffic with legacy keys and with kvkey against its own redis-server. Fails
# when kvkey serves one wrong block, when the legacy run shows none (the soak
# would prove nothing), or when the exposition's kvkey_rejected_blocks_total
# series do not add up to the rejections the soak reports; promtool checks the
# exposition. Its shared-scope scenario must show 0 cross-tenant loads of
# private blocks with kvkey (and some with legacy keys, or it proves nothing),
# and a higher shared-prefix hit rate with the scope than with isolated tenants.
set -euo pipefail
root="${KVKEY_ROOT:-$(cd "$(dirname "$0")/../../.." && pwd)}"
work="$(mktemp -d /tmp/kvkey-soak-ci-XXXXXX)"
trap 'rm -rf "$work"' EXIT
# shellcheck source=scripts/lib/services.sh
. "$root/scripts/lib/services.sh"
extra="$("$root/scripts/ci/python-module.sh" "$root/build/metrics-python")"  # the installed one when 30-python ran
if [ -n "$extra" ]; then export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"; fi

seed="${KVKEY_SOAK_SEED:-$RANDOM}"
"$root/scripts/soak.sh" --quick --seed "$seed" --metrics-out "$work/metrics.txt" --plot "$work/soak.png" \
  | tee "$work/soak.log"
promtool check metrics <"$work/metrics.txt"
/usr/bin/python3 - "$work/soak.log" "$work/metrics.txt" <<'PY'
import re, sys
last = open(sys.argv[1]).read().strip().splitlines()[-1]
m = re.fullmatch(r"soak: legacy wrong loads (\d+), kvkey wrong loads (\d+), kvkey rejections (\d+), "
                 r"kvkey false hits (\d+), scoped prefix hits (\d+)/(\d+), isolated prefix hits (\d+)/(\d+), "
                 r"cross-tenant private loads legacy (\d+) kvkey (\d+)", last)
if not m:
    sys.exit("82-soak: unexpected last line: " + last)
legacy, wrong, rejections, false_hits, scoped, scoped_of, isolated, isolated_of, cross_legacy, cross = map(
    int, m.groups())
series = {}
for line in open(sys.argv[2]):
    if not line.startswith("#") and line.strip():
        name, value = line.rsplit(" ", 1)
        series[name] = int(value)
rejected = sum(v for k, v in series.items() if k.startswith("kvkey_rejected_blocks_total{"))
print("82-soak: exposition rejections %d (soak: %d), false hits %d (soak: %d)"
      % (rejected, rejections, series["kvkey_false_hits_total"], false_hits))
if rejected != rejections or series["kvkey_false_hits_total"] != false_hits:
    sys.exit("82-soak: the exposition does not match the soak's report")
if wrong != 0 or legacy == 0:
    sys.exit("82-soak: expected kvkey wrong loads 0 and legacy wrong loads > 0")
print("82-soak: shared prefix hit rate scoped %d/%d, isolated %d/%d; cross-tenant private loads %d (legacy %d)"
      % (scoped, scoped_of, isolated, isolated_of, cross, cross_legacy))
if cross != 0 or cross_legacy == 0:
    sys.exit("82-soak: expected 0 cross-tenant private loads with kvkey and > 0 with legacy keys")
if not (scoped_of and isolated_of and scoped * isolated_of > isolated * scoped_of):
    sys.exit("82-soak: expected the shared scope's prefix hit rate above the isolated tenants'")
PY
