# shellcheck shell=bash
# Sourced by the CI stages that need a Mooncake master (44-mooncake, 46-lmdeploy):
#   mooncake_master_start LABEL
# starts one (scripts/mooncake.sh start: the wheel's master on free loopback ports)
# with a state folder of its own, $mooncake_state, stops it and removes the folder on
# every exit path, and exports MOONCAKE_MASTER_ADDR, MOONCAKE_METADATA_URL and
# MOONCAKE_PID. Needs $root, the checkout.
mooncake_master_start() {
  mooncake_state="$(mktemp -d "/tmp/kvkey-$1-XXXXXX")"
  export MOONCAKE_STATE_DIR="$mooncake_state"
  trap '"$root/scripts/mooncake.sh" stop >/dev/null || true; rm -rf "$mooncake_state"' EXIT
  trap 'exit 130' INT TERM
  eval "$("$root/scripts/mooncake.sh" start)"
  export MOONCAKE_MASTER_ADDR MOONCAKE_METADATA_URL MOONCAKE_PID
}
