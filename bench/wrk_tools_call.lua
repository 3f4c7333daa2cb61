-- wrk script for the benchmark's small JSON `tools/call` workload (legacy client, so pass-through).
-- Each request carries a fresh JSON-RPC id, as a real client's would. `done` prints one line,
-- `BENCH {json}`, with the request count, errors and latency percentiles in microseconds, which
-- bench/run.py parses (wrk's own --latency table has no p95).
-- Tool name and session id can be overridden: wrk ... -s wrk_tools_call.lua URL -- TOOL SESSION

local counter = 0
local tool = "small"
local head = '{"jsonrpc":"2.0","id":'
local tail

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = "application/json, text/event-stream"
wrk.headers["MCP-Protocol-Version"] = "2025-11-25"
wrk.headers["Mcp-Session-Id"] = "bench-upstream-session"

init = function(args)
  if args[1] ~= nil then tool = args[1] end
  if args[2] ~= nil then wrk.headers["Mcp-Session-Id"] = args[2] end
  tail = ',"method":"tools/call","params":{"name":"' .. tool .. '","arguments":{"text":"hello"}}}'
end

request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, head .. counter .. tail)
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH {"requests":%d,"duration_us":%d,"bytes":%d,"connect_errors":%d,"read_errors":%d,' ..
    '"write_errors":%d,"status_errors":%d,"timeouts":%d,"mean_us":%.1f,"stdev_us":%.1f,"max_us":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p95_us":%d,"p99_us":%d,"p999_us":%d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(95), latency:percentile(99),
    latency:percentile(99.9)))
end
