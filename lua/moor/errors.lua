--- Error objects that reach authors: tables with a `code` and a `message`.
-- Raise them with error(obj, level); they print as "Code: message".
local M = {}

local Error = {}
Error.__index = Error
Error.__name = "moor.Error"
Error.__tostring = function(e)
  return e.code .. ": " .. tostring(e.message)
end
M.Error = Error

function M.new(code, message, fields)
  local e = fields or {}
  e.code = code
  e.message = message
  return setmetatable(e, Error)
end

function M.is(e, code)
  return getmetatable(e) == Error and (code == nil or e.code == code)
end

-- A class is callable: FatalError("msg") or FatalError{ message = ..., retryAfter = ... }.
local function class(code)
  local c = { code = code }
  function c.is(e) return M.is(e, code) end
  return setmetatable(c, {
    __call = function(_, arg)
      if type(arg) == "table" then
        local fields = {}
        for k, v in pairs(arg) do
          if k ~= 1 and k ~= "message" then fields[k] = v end
        end
        return M.new(code, arg.message or arg[1] or code, fields)
      end
      return M.new(code, arg == nil and code or tostring(arg))
    end,
    __tostring = function() return "moor." .. code end,
  })
end

M.FatalError = class("FatalError")
M.RetryableError = class("RetryableError")
M.Cancelled = class("Cancelled")
-- A feature of the seeds moor does not have yet: never retried (as FatalError).
M.NotSupported = class("NotSupported")

--- Raise NotSupported for `what` (level as error's).
function M.not_supported(what, level)
  error(M.NotSupported(what .. " is not supported yet in moor"), (level or 1) + 1)
end

--- Reduce any raised value to a plain { code, message [, retryAfter] [, where] }
-- for the log (where: the "file:line" a tool's error(msg) was raised at).
function M.normalize(err)
  if getmetatable(err) == Error then
    return { code = err.code, message = tostring(err.message), retryAfter = err.retryAfter,
             where = type(err.where) == "string" and err.where or nil }
  elseif type(err) == "table" and type(err.message) == "string" then
    return { code = type(err.code) == "string" and err.code or "Error", message = err.message }
  end
  return { code = "Error", message = tostring(err) }
end

--- The engine's answer to a request it refuses (DESIGN.md: `nil, err` with
-- err = { code, message }): nil and the error, then its code and message
-- again as third and fourth values, for callers that read the older
-- (nil, status, code, message) shape by position. The codes are those of the
-- HTTP API's error JSON; their statuses come from lua/moor/http/status.lua.
function M.fail(code, message)
  return nil, { code = code, message = message }, code, message
end

--- Pass on an err received from below, in fail's shape.
function M.relay(err)
  return nil, err, err.code, err.message
end

--- A write refused because the database cannot be written now.
function M.store_unavailable(cause)
  return M.fail("storage_unavailable", ("the database cannot be written now (%s); nothing was recorded: "
    .. "try again later"):format(tostring(cause)))
end

return M
