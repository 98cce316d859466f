-- The example's payment system: refunds are appended to a ledger file, keyed
-- by an idempotency key so a step that re-runs after a crash refunds once.
local files = require "lib.files"

local M = {}
local LEDGER = os.getenv("MOOR_LEDGER") or ".moor/refunds.ledger"

function M.issue(order_id, amount, key)
  local f = io.open(LEDGER, "r")
  if f then
    for line in f:lines() do
      if line:find(key, 1, true) then f:close(); return "refund-" .. key end
    end
    f:close()
  end
  files.run("mkdir -p " .. files.shell_quote(LEDGER:match("^(.*)/") or "."))
  f = assert(io.open(LEDGER, "a"))
  f:write(("%s %s %.2f\n"):format(key, order_id, amount))
  f:close()
  return "refund-" .. key
end

return M
