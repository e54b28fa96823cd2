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
# from GitHub: without that network it cannot be built, and the bench skips it (said so).
if [ ! -x "$dir/rust/bin/mcp-proxy" ]; then
  cargo install --locked --root "$dir/rust" mcp-stdio-proxy@0.2.10 ||
    echo "peers.sh: mcp-stdio-proxy did not build (see above); the bench will skip it" >&2
fi
ls -l "$dir/node_modules/.bin/supergateway" "$dir/node_modules/.bin/mcp-remote" "$dir/py/bin/mcp-proxy" "$dir/rust/bin/" 2>&1 || true
