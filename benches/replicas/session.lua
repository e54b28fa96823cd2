-- wrk script: 2025 session `tools/call echo` POSTs (Mcp-Session-Id), spread over the sessions
-- in SIDS (comma-separated, minted beforehand by benches/replicas/run.sh). Through a
-- round-robin balancer in front of 3 replicas, 2 requests in 3 land on a replica that does not
-- own the session and are forwarded to its owner.
-- Usage: SIDS=a,b,c wrk -t2 -c32 -d5s -s benches/replicas/session.lua http://127.0.0.1:PORT/mcp
local sids = {}
for s in string.gmatch(os.getenv("SIDS") or "", "[^,]+") do
  sids[#sids + 1] = s
end
assert(#sids > 0, "set SIDS")
local body = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"'
  .. string.rep("abcdefghij", 10) .. '"}}}'
local n = 0

request = function()
  n = n + 1
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream",
    ["MCP-Protocol-Version"] = "2025-11-25",
    ["Mcp-Session-Id"] = sids[(n % #sids) + 1],
  }, body)
end

function done(summary, latency, requests)
  io.write(string.format("non-200 responses: %d\n", summary.errors.status))
  for _, p in pairs({ 50, 90, 99 }) do
    io.write(string.format("latency p%d: %.3f ms\n", p, latency:percentile(p) / 1000))
  end
end
