--- moor.harness.script: a scripted harness agent's turn, for
-- moor.testing.workflow (seed 001 "Testing a tool"). The script runs as a
-- coroutine outside the run; its turn.tool(name, input) goes through
-- moor.harness.host's call path (the same checks, the same delivery, the same
-- handler and recorded answer a launcher call gets) and waits for the answer;
-- what the script returns is the turn's answer, checked against its schema,
-- or one of the endings made by t.reply.* (a REPLY table).
local json = require "moor.json"
local schema = require "moor.schema"
local errors = require "moor.errors"
local core = require "moor.core"
local host = require "moor.harness.host"

local type, getmetatable, tostring, setmetatable = type, getmetatable, tostring, setmetatable
local encode, decode = json.encode, json.decode
local after = core.after

local M = {}

local REPLY = setmetatable({}, { __name = "moor.testing.reply" })
M.REPLY = REPLY

--- Play one turn of agent a with script (host.script's runner).
function M.run(a, turn, script, prompt)
  local co
  local function resume(...)
    local okr, v = coroutine.resume(co, ...)
    if not okr then
      return host.end_turn(a, turn, "failed", { error = "the scripted turn raised: "
        .. tostring(errors.normalize(v).message) })
    end
    if coroutine.status(co) ~= "dead" then return end -- (waiting for a call's answer)
    if turn.ended then return end
    if getmetatable(v) == REPLY then
      return host.end_turn(a, turn, v.reason, v.error and { error = v.error } or nil)
    end
    local value = v
    if value ~= nil and type(value) ~= "string" then
      local text = encode(value)
      value = text and decode(text) or value
    end
    if turn.schema then
      local okv, verr = schema.validate(turn.schema, value, "answer")
      if not okv then
        return host.end_turn(a, turn, "failed",
          { error = "the scripted answer doesn't fit the turn's schema: " .. verr })
      end
    end
    host.deliver(a, { turn = turn.n, answer = value == nil and json.null or value })
    turn.answered = true
    host.end_turn(a, turn, "answered")
  end
  local api = { prompt = prompt, schema = turn.schema, key = a.key, n = turn.n }
  function api.tool(name, input)
    local result
    local function got(res)
      if result then return end
      result = res
      if coroutine.running() ~= co then after(0, function() resume(res) end) end
    end
    local normalized = {}
    if input ~= nil then
      local text = encode(input)
      normalized = text and decode(text) or input
    end
    host.call_tool(a, got, name, nil, nil, normalized)
    if not result then result = coroutine.yield() end
    if result.code == "ok" then return { kind = "result", output = result.output } end
    if result.code == "failed" then return { kind = "failed", outcome = "failed", error = result.error } end
    return { kind = "refused", code = result.code, error = result.error }
  end
  co = coroutine.create(function() return script(api) end)
  resume()
end

return M
