--- The HTTP status of every error code moor answers with: the engine's
-- err = { code, message } (moor.errors.fail) and the HTTP API's own. The one
-- table statuses come from: lua/moor/http.lua answers with it, and the few
-- callers that answer as the HTTP API does (lua/moor/host.lua for the C API,
-- moor.testing, session.send and session.line) convert with with_status
-- (host/error.c then reads only the code and message).
local M = {}

local STATUS = {
  bad_request = 400, bad_json = 400, invalid_input = 400, invalid_option = 400, freeform_not_allowed = 400,
  approval_unbound = 400,
  unauthorized = 401,
  forbidden_origin = 403,
  not_found = 404,
  method_not_allowed = 405,
  already_resolved = 409, already_settled = 409, approval_mismatch = 409,
  unsupported_media_type = 415,
  misdirected_request = 421,
  too_many_deliveries = 429, too_many_streams = 429,
  internal = 500,
  storage_unavailable = 503,
}

--- The HTTP status for an error code (500 for a code this table lacks).
function M.of(code) return STATUS[code] or 500 end

--- An engine answer (v, or nil and err) as the HTTP API gives it:
-- v (and its second value), or nil, status, code, message.
function M.with_status(v, err)
  if v then return v, err end
  return nil, STATUS[err.code] or 500, err.code, err.message
end

return M
