-- wrk script: POST /v1/orders again with keys of the setup step (the same
-- key and body), each thread cycling through its own slice of them.
--   wrk ... -s replay.lua URL -- FILES THREADS
-- FILES: comma-separated "ORDER_ID KEY" files of setup.lua.
local common = require "common"
setup, done = common.setup, common.done

local reqs, count, i

function init(args)
  local lines
  lines, count = common.slice(args[1], id, tonumber(args[2]))
  assert(count > 0, "replay: no setup keys for thread " .. id)
  reqs = {}
  for j, line in ipairs(lines) do
    local key = line:match("^%S+ (%S+)$")
    reqs[j] = common.create(key, key)
  end
  i = 0
end

function request()
  i = i % count + 1
  return reqs[i]
end
