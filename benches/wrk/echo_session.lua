-- wrk script: 2025 session `tools/call echo` POSTs (Mcp-Session-Id), checked.
-- The session is minted beforehand (POST initialize, POST notifications/initialized), e.g. by
-- benches/serve_peers.sh; its id and negotiated protocol version come from the environment:
--   MCP_SESSION_ID (required), MCP_PROTOCOL_VERSION (default 2025-11-25),
--   ECHO_BYTES (bytes of echo text, default 100; e.g. 65536).
-- Every request has its own JSON-RPC id (a session's in-flight ids must be distinct: servers
-- route a response to the HTTP request by its id). Every response is checked: status 200 and a
-- body (JSON or SSE `data:` lines) that holds a `"result"` and the echoed text; done() prints
-- the count of the others ("bad bodies") and of the non-200s.
-- Usage: MCP_SESSION_ID=... ECHO_BYTES=100 wrk -t1 -c16 -d3s -s benches/wrk/echo_session.lua \
--          http://127.0.0.1:PORT/mcp
local sid = os.getenv("MCP_SESSION_ID")
assert(sid and sid ~= "", "set MCP_SESSION_ID")
local version = os.getenv("MCP_PROTOCOL_VERSION") or "2025-11-25"
local n = tonumber(os.getenv("ECHO_BYTES") or "100")
local alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 "
local parts = {}
for i = 0, n - 1 do
  local k = (i % #alphabet) + 1
  parts[#parts + 1] = alphabet:sub(k, k)
end
local text = table.concat(parts)
local head = '{"jsonrpc":"2.0","id":'
local tail = ',"method":"tools/call","params":{"name":"echo","arguments":{"text":"' .. text .. '"}}}'
local headers = {
  ["Content-Type"] = "application/json",
  ["Accept"] = "application/json, text/event-stream",
  ["Mcp-Session-Id"] = sid,
  ["MCP-Protocol-Version"] = version,
}

-- Per-thread state (each wrk thread has its own Lua state); done() reads it via thread:get.
local threads = {}
local tid = 0
function setup(thread)
  thread:set("tid", #threads + 1)
  threads[#threads + 1] = thread
end

seq = 0
bad = 0
non200 = 0

function request()
  seq = seq + 1
  return wrk.format("POST", nil, headers, head .. (tid * 1000000000 + seq) .. tail)
end

function init(args)
  tid = tonumber(wrk.thread:get("tid")) or 1
end

function response(status, hdrs, body)
  if status ~= 200 then
    non200 = non200 + 1
  elseif not body or not string.find(body, text, 1, true) or not string.find(body, '"result"', 1, true) then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local b, s = 0, 0
  for _, t in ipairs(threads) do
    b = b + (tonumber(t:get("bad")) or 0)
    s = s + (tonumber(t:get("non200")) or 0)
  end
  io.write(string.format("bad bodies: %d\n", b))
  io.write(string.format("non-200 responses: %d\n", s))
  for _, p in pairs({ 50, 90, 99 }) do
    io.write(string.format("latency p%d: %.3f ms\n", p, latency:percentile(p) / 1000))
  end
end
