-- wrk script: POST /v1/orders/{id}/pay, each request a fresh RCVD order of
-- the setup step (each thread its own slice of them) with a new key, paid
-- with the built-in simulator's pm_card_visa. A thread that runs out of
-- orders stops and counts it in `exhausted` (the figure is then too low).
--   wrk ... -s pay.lua URL -- FILES THREADS PREFIX
local common = require "common"
setup, done = common.setup, common.done

local ids, count, i, prefix
local body = '{"amount":1250,"currency":"USD","payment_method":"pm_card_visa"}'

function init(args)
  local lines
  lines, count = common.slice(args[1], id, tonumber(args[2]))
  ids = {}
  for j, line in ipairs(lines) do ids[j] = line:match("^(%S+)") end
  prefix = args[3] .. "-"
  i = 0
end

function request()
  i = i + 1
  if i > count then
    wrk.thread:set("exhausted", 1)
    wrk.thread:stop()
    return wrk.format("GET", "/v1/orders/no-order-left", { ["Authorization"] = common.AUTH })
  end
  return wrk.format("POST", "/v1/orders/" .. ids[i] .. "/pay", {
    ["Authorization"] = common.AUTH,
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = prefix .. ids[i],
  }, body)
end
