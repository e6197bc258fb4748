-- wrk script: POST /v1/orders with a new Idempotency-Key per request.
--   wrk ... -s create.lua URL -- PREFIX
-- Keys are PREFIX-t<thread>-<n>; the body is the same for every request.
local common = require "common"
setup, done = common.setup, common.done

local prefix, n

function init(args)
  prefix = args[1] .. "-t" .. id .. "-"
  n = 0
end

function request()
  n = n + 1
  return common.create(prefix .. n, "wrk-bench")
end
