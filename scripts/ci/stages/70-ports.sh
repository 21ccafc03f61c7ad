#!/usr/bin/env bash
# The Go and Rust ports (ports/go, ports/rust) and the conformance runner
# (docs/conformance.md): go vet/test and cargo build/test/fmt/clippy against
# the committed vectors, their dependencies from the Go module proxy and
# crates.io; the READMEs' quick starts in a module and a crate outside the
# tree; the Redis examples on values the C++ tool sealed (one redis-server);
# then `kvkey conformance` over the C++, Python, Go and Rust testees with the
# committed vectors and 2,000 random cases from a fresh seed. Uses the
# preinstalled Go and Rust toolchains and builds what it runs (the tool in
# build/gcc, as stage 10 does; the Python module when the venv has none or one
# of another format version), so it
# also runs alone: scripts/test.sh ports.
set -euo pipefail
root="$KVKEY_ROOT"
jobs="${KVKEY_JOBS:-2}"
cases="${KVKEY_CONFORMANCE_CASES:-2000}"

# 1. The preinstalled toolchains (docs/conformance.md, "Toolchains"): Go 1.26
#    in /usr/local/go and Rust 1.95 from rustup in ~/.cargo/bin, with their
#    registries (the Go module proxy, crates.io) for the ports' dependencies,
#    pinned by ports/go/go.sum and ports/rust/Cargo.lock. cargo clippy and
#    cargo fmt are rustup components: added when missing, and the stage fails
#    if they cannot be.
export PATH="/usr/local/go/bin:$HOME/.cargo/bin:$PATH"
command -v go >/dev/null || { echo "70-ports: go (Go 1.26, /usr/local/go/bin) is not installed" >&2; exit 1; }
command -v cargo >/dev/null || { echo "70-ports: cargo (Rust 1.95 from rustup, ~/.cargo/bin) is not installed" >&2; exit 1; }
case "$(go env GOVERSION)" in go1.26|go1.26.*) ;; *)
  echo "70-ports: Go 1.26 is required, $(command -v go) is $(go env GOVERSION)" >&2; exit 1 ;; esac
case "$(rustc --version)" in "rustc 1.95."*) ;; *)
  echo "70-ports: Rust 1.95 is required, $(command -v rustc) is $(rustc --version)" >&2; exit 1 ;; esac
for component in clippy rustfmt; do
  subcommand="${component/rustfmt/fmt}"
  if ! cargo "$subcommand" --version >/dev/null 2>&1; then
    echo "70-ports: adding the rustup component $component"
    rustup component add "$component" ||
      { echo "70-ports: cargo $subcommand is missing and rustup could not add $component" >&2; exit 1; }
  fi
done
echo "70-ports: $(go version); $(cargo --version); $(cargo clippy --version)"

# 2. The tool (the runner and the C++ testee), in the build directory stage 10
#    configures with the same options (so after it this is a no-op), and the
#    Python module: the one stage 30 installed in the project venv, else one
#    built here.
cmake -S "$root" -B "$root/build/gcc" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=gcc \
  -DCMAKE_CXX_COMPILER=g++ -DKVKEY_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build "$root/build/gcc" --target kvkey_tool -j"$jobs"
# shellcheck source=scripts/ci/lib/python.sh
. "$root/scripts/ci/lib/python.sh"
pyextra="$("$root/scripts/ci/python-module.sh" "$root/build/ports-python")"
kvkey="$root/build/gcc/tools/kvkey"
# The Python testee must speak this tree's format: a venv module of another
# format version (installed from an older tree) is replaced by one built here.
want_format="$("$kvkey" --version | sed -n 's/.*format version \([0-9]*\).*/\1/p')"
have_format="$(cd / && PYTHONPATH="$pyextra" "$py" -c 'import kvkey; print(kvkey.format_version)' 2>/dev/null || true)"
if [ -z "$want_format" ]; then echo "70-ports: kvkey --version names no format version" >&2; exit 1; fi
if [ "$have_format" != "$want_format" ]; then
  echo "70-ports: the venv's kvkey module is format ${have_format:-(none)}, this tree's $want_format: building one in build/ports-python"
  cmake -S "$root" -B "$root/build/ports-python" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVKEY_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE=/usr/bin/python3 -DCMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF -DKVKEY_BUILD_TESTS=OFF \
    -DKVKEY_BUILD_EXAMPLES=OFF -DKVKEY_BUILD_TOOLS=OFF >/dev/null
  cmake --build "$root/build/ports-python" --target kvkey_python -j"$jobs"
  pyextra="$root/build/ports-python/python"
  have_format="$(cd / && PYTHONPATH="$pyextra" "$py" -c 'import kvkey; print(kvkey.format_version)')"
  [ "$have_format" = "$want_format" ] || { echo "70-ports: build/ports-python's kvkey is format $have_format" >&2; exit 1; }
fi

# 3. Go: vet, formatting, tests (which read tests/vectors/).
cd "$root/ports/go"
go vet ./...
unformatted="$(gofmt -l .)"
if [ -n "$unformatted" ]; then echo "70-ports: gofmt would change: $unformatted" >&2; exit 1; fi
go test ./...
go build ./cmd/kvkey-testee && rm -f kvkey-testee

# 3b. The Go README's quick start as a user runs it: its setup, main.go and
#     run blocks, in a throwaway module outside the tree that requires the
#     port through a `replace` directive; the root it prints must be the tool's.
quickstart_block() {  # the fenced block after <!-- quickstart:$1 --> in ports/go/README.md
  awk -v mark="<!-- quickstart:$1 -->" '$0 == mark {found = 1; next}
    found && /^```/ {if (inside) exit; inside = 1; next} found && inside' "$root/ports/go/README.md"
}
module="$(mktemp -d)"
(
  cd "$module"
  quickstart_block setup >setup.sh
  quickstart_block main.go >main.go
  quickstart_block run >run.sh
  KVKEY="$root" bash -eu setup.sh
  KVKEY="$root" bash -eu run.sh >out.txt
)
want_root="$("$kvkey" identity "$root/examples/identities/qwen-fp16.json" | awk '$1 == "root" {print $NF}')"
if ! grep -qx "root $want_root" "$module/out.txt" || ! grep -qx "same root true" "$module/out.txt"; then
  echo "70-ports: the Go quick start printed (want root $want_root):" >&2
  cat "$module/out.txt" >&2
  exit 1
fi
rm -rf "$module"
echo "70-ports: the Go README quick start runs from another module"

# 4. Rust, from crates.io with the committed Cargo.lock.
cd "$root/ports/rust"
cargo build --locked
cargo test --locked
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings

# 4b. ports/rust/README.md's quick start as a user follows it: a crate outside
#     the tree that depends on the port by path, the one documented config
#     README's src/main.rs; its block hashes, u64 projections and
#     store keys must be what `kvkey keys` prints for the same file and tokens.
quickstart="$(mktemp -d)"
(
  KVKEY="$root"
  cd "$quickstart"
  cargo new --vcs none quickstart >/dev/null 2>&1
  cd quickstart
  echo "kvkey = { path = \"$KVKEY/ports/rust\" }" >> Cargo.toml
  /usr/bin/python3 - "$KVKEY/ports/rust/README.md" > src/main.rs <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- quickstart: src/main.rs -->\s*```rust\n(.*?)```", text, re.S)
if not m:
    sys.exit("70-ports: no quick start src/main.rs in ports/rust/README.md")
print("\n".join(line[3:] if line.startswith("   ") else line for line in m.group(1).splitlines()))
PY
  cargo run --quiet -- "$KVKEY/examples/identities/qwen-fp16.json" > got.txt
  /usr/bin/python3 -c 'print(list(range(256)))' > tokens.json
  "$kvkey" keys "$KVKEY/examples/identities/qwen-fp16.json" --tokens tokens.json --json > want.json
  /usr/bin/python3 - <<'PY'
import json
want = [f'{b["block_hash"]} {int(b["block_hash"][:16], 16)} {b["store_key"]}' for b in json.load(open("want.json"))["blocks"]]
got = open("got.txt").read().splitlines()
if got != want or not got:
    raise SystemExit(f"70-ports: the Rust quick start printed {got!r}, kvkey keys {want!r}")
print(f"70-ports: the Rust quick start builds outside the tree and prints kvkey's {len(got)} keys")
PY
)
rm -rf "$quickstart"

# 4c. Values a C++ writer stored in Redis, read by the Go and Rust examples
#     (ports/go/examples/redisread, ports/rust/examples/redis_read), which
#     verify each whole: block 0's value as `kvkey seal` made it (the envelope,
#     then the payload), block 1's with one payload bit flipped (a named
#     rejection, on the payload), block 2's never written (a miss).
# shellcheck source=scripts/ci/lib/redis.sh
source "$root/scripts/ci/lib/redis.sh"
trap redis_stop_all EXIT
redis_dir="$(mktemp -d)"
redis_start 70-ports "$redis_dir"
identity="$root/examples/identities/qwen-fp16.json"
/usr/bin/python3 -c 'print(list(range(192)))' >"$redis_dir/tokens.json"  # three blocks of 64 tokens
"$kvkey" keys "$identity" --tokens "$redis_dir/tokens.json" --json >"$redis_dir/keys.json"
read -r b0 b1 <<<"$(/usr/bin/python3 -c 'import json, sys
print(" ".join(b["block_hash"] for b in json.load(open(sys.argv[1]))["blocks"][:2]))' "$redis_dir/keys.json")"
mapfile -t keys < <(/usr/bin/python3 -c 'import json, sys
print("\n".join(b["store_key"] for b in json.load(open(sys.argv[1]))["blocks"]))' "$redis_dir/keys.json")
head -c 4096 /dev/urandom >"$redis_dir/payload"
for i in 0 1; do
  block="b$i"
  "$kvkey" seal "$identity" --block "${!block}" --payload "$redis_dir/payload" -o "$redis_dir/v$i" >/dev/null
  cat "$redis_dir/payload" >>"$redis_dir/v$i"
done
/usr/bin/python3 -c 'import sys
v = bytearray(open(sys.argv[1], "rb").read()); v[1024 + 100] ^= 0x08; open(sys.argv[1], "wb").write(v)' "$redis_dir/v1"
redis-cli -p "$REDIS_PORT" -x SET "${keys[0]}" <"$redis_dir/v0" >/dev/null
redis-cli -p "$REDIS_PORT" -x SET "${keys[1]}" <"$redis_dir/v1" >/dev/null
printf '%s\n' "block 0 ${keys[0]} ok 4096" "block 1 ${keys[1]} rejected payload_mismatch payload" \
  "block 2 ${keys[2]} miss" >"$redis_dir/want.txt"
read -r -a token_args <<<"$(seq -s ' ' 0 191)"
(cd "$root/ports/go" && go run ./examples/redisread "127.0.0.1:$REDIS_PORT" "$identity" "${token_args[@]}") \
  >"$redis_dir/go.txt"
cargo run --quiet --locked --manifest-path "$root/ports/rust/Cargo.toml" --example redis_read -- \
  "127.0.0.1:$REDIS_PORT" "$identity" "${token_args[@]}" >"$redis_dir/rust.txt"
for port in go rust; do
  if ! diff -u "$redis_dir/want.txt" "$redis_dir/$port.txt" >&2; then
    echo "70-ports: the $port Redis example read other verdicts from the values kvkey sealed" >&2
    exit 1
  fi
done
redis_stop_all
rm -rf "$redis_dir"
echo "70-ports: the Go and Rust examples verify values the C++ tool sealed in Redis (ok, rejected, miss)"

# 5. The conformance runner over each testee: the committed vectors, then
#    random cases from one fresh seed (printed: rerun with --seed).
cd "$root"
seed="${KVKEY_CONFORMANCE_SEED:-$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')}"
echo "70-ports: conformance seed $seed ($cases random cases per testee)"
status=0
for testee in "$kvkey conformance-testee" \
              "env PYTHONPATH=$pyextra $py tools/conformance/testee.py" \
              "go run ./ports/go/cmd/kvkey-testee" \
              "cargo run --quiet --locked --manifest-path ports/rust/Cargo.toml --bin kvkey-testee"; do
  "$kvkey" conformance --testee "$testee" --vectors tests/vectors/format-v4.json --cases "$cases" --seed "$seed" \
    || status=1
  # Hostile lines (docs/conformance.md, "Lines that are not requests"): every one answered, none fatal.
  "$kvkey" conformance --testee "$testee" --mutate --cases "$cases" --seed "$seed" \
    || status=1
done
exit "$status"
