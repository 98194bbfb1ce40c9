-- Closed-loop replay of a request mix for wrk (scripts/bench/wrk.py builds the file and reads the result).
-- Usage: wrk -t1 -cN -dS -s wrk_replay.lua http://127.0.0.1:PORT -- REQUESTS_FILE MAX_REQUESTS
-- REQUESTS_FILE: one request per line, "<path>\t<json body>"; requests are sent in file order, cycling.
-- MAX_REQUESTS: the thread stops after sending this many (the count bound; -d is the time bound).
-- done() prints one line "WRK_JSON {...}": answers, requests issued, degraded answers, errors, latency percentiles in
-- microseconds. Degraded: a 200 whose body says "degraded": true came from a fallback model (triserve's answers say so;
-- the peers' never do); scripts/bench/wrk.py counts it apart, never as throughput (scripts/drills/common.answer_kind).
-- wrk's latency histogram holds every answer: it cannot be split by kind.

local reqs, idx, max_requests = {}, 0, 0
sent = 0  -- globals: done() reads them from every thread's state
degraded = 0
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  for line in io.lines(args[1]) do
    local tab = line:find("\t", 1, true)
    if tab then
      reqs[#reqs + 1] = wrk.format("POST", line:sub(1, tab - 1), {["Content-Type"] = "application/json"},
                                   line:sub(tab + 1))
    end
  end
  if #reqs == 0 then error("no requests in " .. args[1]) end
  max_requests = tonumber(args[2]) or 0
end

function request()
  sent = sent + 1
  if max_requests > 0 and sent > max_requests then wrk.thread:stop() end
  idx = idx % #reqs + 1
  return reqs[idx]
end

function response(status, headers, body)
  if status == 200 and body and body:find('"degraded"%s*:%s*true') then degraded = degraded + 1 end
end

function done(summary, latency, requests)
  local e = summary.errors
  local issued, fallback = 0, 0
  for _, t in ipairs(threads) do
    issued = issued + (t:get("sent") or 0)
    fallback = fallback + (t:get("degraded") or 0)
  end
  io.write(string.format(
    'WRK_JSON {"requests":%d,"sent":%d,"degraded":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"p99.9":%d,"max":%d,"mean":%.1f}}\n',
    summary.requests, issued, fallback, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
    latency.max, latency.mean))
end
