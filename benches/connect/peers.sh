#!/usr/bin/env bash
# Installs the peers of `cargo bench --bench connect` where the bench looks for them
# (DIR, default target/bench-peers): npm supergateway and mcp-remote, PyPI mcp-proxy (in a
# venv) and crates.io mcp-stdio-proxy (built with cargo; a few minutes on two cores). Pinned to
# the versions RESULTS.md quotes. Re-running it is cheap: what is there is kept.
# Usage: benches/connect/peers.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir="${1:-target/bench-peers}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
if [ ! -x "$dir/node_modules/.bin/supergateway" ] || [ ! -x "$dir/node_modules/.bin/mcp-remote" ]; then
  (cd "$dir" && { [ -f package.json ] || npm init -y >/dev/null; } &&
    npm install --no-audit --no-fund supergateway@4.0.0 mcp-remote@0.15.1)
fi
if [ ! -x "$dir/py/bin/mcp-proxy" ]; then
  python3 -m venv "$dir/py"
  "$dir/py/bin/pip" install -q mcp-proxy==0.13.0
fi
# mcp-stdio-proxy 0.2.10 depends on utoipa-swagger-ui, whose build script downloads Swagger UI
# from GitHub unless SWAGGER_UI_DOWNLOAD_URL names a local zip (file://). crates.io's
# utoipa-swagger-ui-vendored carries that zip: fetch it (a throwaway package that depends on
# it, `cargo fetch`) and point the build at it, so the peer builds with the registry alone.
if [ ! -x "$dir/rust/bin/mcp-proxy" ]; then
  vend="$dir/vendored-swagger"
  mkdir -p "$vend/src"
  printf '[package]\nname = "vend"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nutoipa-swagger-ui-vendored = "=0.2.0"\n' >"$vend/Cargo.toml"
  echo 'fn main() {}' >"$vend/src/main.rs"
  zip=""
  if (cd "$vend" && cargo fetch -q); then
    zip=$(cd "$vend" && cargo metadata --format-version 1 -q |
      python3 -c 'import json,sys; m=json.load(sys.stdin); print(next(p["manifest_path"] for p in m["packages"] if p["name"]=="utoipa-swagger-ui-vendored"))')
    zip=$(ls "$(dirname "$zip")"/res/*.zip 2>/dev/null | head -n1)
  fi
  if [ -n "$zip" ]; then export SWAGGER_UI_DOWNLOAD_URL="file://$zip"; fi
  cargo install --locked --root "$dir/rust" mcp-stdio-proxy@0.2.10 ||
    echo "peers.sh: mcp-stdio-proxy did not build (see above); the bench will skip it" >&2
fi
ls -l "$dir/node_modules/.bin/supergateway" "$dir/node_modules/.bin/mcp-remote" "$dir/py/bin/mcp-proxy" "$dir/rust/bin/" 2>&1 || true
