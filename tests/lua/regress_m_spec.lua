-- Regression (review): a core.after timer still pending when the host shuts
-- down must be dropped, not fired on a closed Lua state (it crashed the host,
-- so the whole spec run failed).
local core = require "moor.core"
it("leaves a timer pending at exit", function()
  assert.has_no.errors(function() core.after(300, function() end) end)
end)
