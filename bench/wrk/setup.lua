-- wrk script, not measured: creates the orders that the replay and pay
-- phases use, and writes "ORDER_ID KEY" lines for them to OUT-t<thread>.txt.
--   wrk ... -s setup.lua URL -- PREFIX OUT
-- The customer_id of each order is its key, so that the answer names it.
local common = require "common"
setup, done = common.setup, common.done

local prefix, n, out

function init(args)
  prefix = args[1] .. "-t" .. id .. "-"
  n = 0
  out = assert(io.open(args[2] .. "-t" .. id .. ".txt", "w"))
  out:setvbuf("line")
end

function request()
  n = n + 1
  return common.create(prefix .. n, prefix .. n)
end

function response(status, headers, body)
  if status == 201 then
    local oid = body:match('"id":%s*"([^"]+)"')
    local key = body:match('"customer_id":%s*"([^"]+)"')
    if oid and key then out:write(oid, " ", key, "\n") end
  end
end
