-- Shared by the wrk scripts of bench/run.sh (found through LUA_PATH).
--
-- setup numbers the threads (global `id` in each thread, from 0); done prints
-- one line that run.sh reads:
--   WRK ok=N requests=N non2xx=N socket_errors=N timeouts=N seconds=S rps=R p50_ms=X p99_ms=Y exhausted=N
-- ok counts 2xx answers only, rps = ok / seconds; the latency percentiles are
-- wrk's, over every answer (closed loop: one request in flight per connection).
local M = {}

-- AUTH is the development key orderd prints when no API keys are configured.
M.AUTH = "Bearer sk_dev_orderly_local"

-- body returns a create's body. setup.lua and replay.lua make customer_id the
-- idempotency key, so that an answer names its key and a replay can rebuild
-- the body; create.lua sends the same body every time.
function M.body(customer)
  return '{"customer_id":"' .. customer .. '","currency":"USD","items":[{"sku":"sku_1","quantity":1,"unit_price":1250}]}'
end

-- create returns a POST /v1/orders with the given key and customer_id.
function M.create(key, customer)
  return wrk.format("POST", "/v1/orders", {
    ["Authorization"] = M.AUTH,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = key,
  }, M.body(customer))
end

-- slice returns the lines of the comma-separated files `names` that belong
-- to thread `id` of `n` (every n-th line, from the id-th), and their count.
function M.slice(names, id, n)
  local out, i = {}, 0
  for name in string.gmatch(names, "[^,]+") do
    for line in io.lines(name) do
      if line ~= "" then
        if i % n == id then out[#out + 1] = line end
        i = i + 1
      end
    end
  end
  return out, #out
end

local threads = {}

function M.setup(thread)
  thread:set("id", #threads)
  thread:set("exhausted", 0)
  threads[#threads + 1] = thread
end

function M.done(summary, latency, requests)
  local e = summary.errors
  local ok = summary.requests - e.status
  local secs = summary.duration / 1e6
  local exhausted = 0
  for _, t in ipairs(threads) do exhausted = exhausted + (t:get("exhausted") or 0) end
  io.write(string.format(
    "WRK ok=%d requests=%d non2xx=%d socket_errors=%d timeouts=%d seconds=%.3f rps=%.1f p50_ms=%.3f p99_ms=%.3f exhausted=%d\n",
    ok, summary.requests, e.status, e.connect + e.read + e.write, e.timeout, secs, ok / secs,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, exhausted))
end

return M
