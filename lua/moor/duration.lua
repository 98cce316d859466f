--- Durations: "4h", "20m", "30s", "250ms", "1d", "1h30m", or a number of milliseconds.
local conf = require "moor.conf"

local M = {}

local MAX = conf.MAX_DURATION

-- ms as an integer, or nil and why when it is too long for the clock (a
-- float due time would reach the timer heap and the host's loop).
local function bounded(ms, d)
  if ms > MAX then
    return nil, ("duration %s is too long: at most %d ms (about 285,000 years)"):format(tostring(d), MAX)
  end
  return math.tointeger(math.floor(ms))
end

local UNITS = { ms = 1, s = 1000, m = 60000, h = 3600000, d = 86400000 }

function M.parse(d)
  if math.type(d) == "integer" or (type(d) == "number" and d == d and d >= 0) then
    if d < 0 then return nil, "a duration cannot be negative" end
    return bounded(d, d)
  end
  if type(d) ~= "string" or d == "" then
    return nil, ("a duration is a number of milliseconds or a string like \"30s\", not %s"):format(
      type(d) == "string" and '""' or type(d))
  end
  local total, pos = 0, 1
  while pos <= #d do
    local num, unit, nxt = d:match("^(%d+%.?%d*)(%a+)()", pos)
    if not num or not UNITS[unit] then
      return nil, ("bad duration %q: use a number with ms, s, m, h or d, as \"4h\", \"20m\", \"250ms\""):format(d)
    end
    total = total + tonumber(num) * UNITS[unit]
    pos = nxt
  end
  return bounded(total, ("%q"):format(d))
end

--- Like parse, but raises a clear error at the caller's caller.
function M.check(d, level)
  local ms, err = M.parse(d)
  if not ms then error(err, (level or 1) + 1) end
  return ms
end

return M
