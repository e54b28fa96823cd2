-- wrk script: 2026-07-28 stateless `tools/call echo` POSTs to mcp-bridge.
-- Payload size (bytes of echo text) from the environment: ECHO_BYTES=100 (default) or 65536.
-- Usage: ECHO_BYTES=100 wrk -t1 -c16 -d5s -s benches/wrk/echo.lua http://127.0.0.1:PORT/mcp
local n = tonumber(os.getenv("ECHO_BYTES") or "100")
local alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 "
local parts = {}
for i = 0, n - 1 do
  local k = (i % #alphabet) + 1
  parts[#parts + 1] = alphabet:sub(k, k)
end
local text = table.concat(parts)

wrk.method = "POST"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"'
  .. text
  .. '"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
wrk.headers["Mcp-Method"] = "tools/call"
wrk.headers["Mcp-Name"] = "echo"

function done(summary, latency, requests)
  io.write(string.format("non-200 responses: %d\n", summary.errors.status))
  for _, p in pairs({ 50, 90, 99 }) do
    io.write(string.format("latency p%d: %.3f ms\n", p, latency:percentile(p) / 1000))
  end
end
