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

-- v as a launcher call would carry it: through JSON (v itself when it isn't JSON).
local function as_json(v)
  local text = encode(v)
  return text and decode(text) or v
end

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
    if turn.call then -- (as the launcher's result is refused while a call runs)
      return host.end_turn(a, turn, "failed", { error = ("the scripted turn answered while its call of %s was"
        .. " running: await what turn.send gave before answering"):format(tostring(turn.call.tool)) })
    end
    local value = v
    if value ~= nil and type(value) ~= "string" then value = as_json(value) end
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
  local api = { prompt = prompt, schema = turn.schema, key = a.key, n = turn.n, resume = turn.resume,
    fork = turn.fork }
  --- turn.session(id): the conversation this scripted harness holds (what a
  -- real harness reports; the agent's next turns resume it, forks fork it).
  function api.session(id) turn.stream.session = id end
  -- turn.send(name, input) -> await(): start a call and go on (as a harness
  -- that stopped waiting and calls again); await() gives its outcome.
  function api.send(name, input)
    local box = {}
    local function got(res)
      if box.res then return end
      box.res = res
      if box.waiting then
        box.waiting = false
        after(0, function() resume() end)
      end
    end
    host.call_tool(a, got, name, nil, nil, input == nil and {} or as_json(input))
    return function()
      if not box.res then
        box.waiting = true
        coroutine.yield()
      end
      local res = box.res
      if res.code == "ok" then return { kind = "result", output = res.output } end
      if res.code == "failed" then return { kind = "failed", outcome = "failed", error = res.error } end
      return { kind = "refused", code = res.code, error = res.error }
    end
  end
  --- turn.tool(name, input?): a call, through the same checks and handler
  -- a launcher call goes through; its outcome once it has answered.
  function api.tool(name, input) return api.send(name, input)() end
  co = coroutine.create(function() return script(api) end)
  resume()
end

return M
