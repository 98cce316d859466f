--- `moor init [DIR]`: write a new agent project into dir, ready for `moor
-- call`, `moor dev`, `moor chat` and `moor test` at once:
--   agent/agent.lua              the agent, on a scripted model until a key is set
--   agent/tools/greet.lua        a plain tool
--   agent/tools/remind.lua       a workflow tool: a step, then a durable sleep
--   tests/lua/*_spec.lua         a spec for each (what `moor test` runs)
--   .luarc.json                  the Lua language server, pointed at moor's annotations
--   .gitignore                   .moor/ (the database)
-- It never overwrites: when any of these files exists it writes nothing and
-- names them. host/scaffold.c (moor_scaffold) calls write() on a Lua state
-- of its own, with mkdir(path) and create(path, text) (a new file only:
-- true | nil, message, "exists" | "io"), which Lua lacks, and the Lua
-- directory in use.
local M = {}

local AGENT = [[
-- The agent that `moor chat` and `moor dev` (POST /v1/sessions) hold sessions with.
$MOOR

return moor.defineAgent {
  -- A scripted model until a key is set: it calls greet with what you type
  -- and answers with its result, with no network and no key. For a real
  -- model, replace the model line with one of:
  --   model = "openai/gpt-5.5",            -- $OPENAI_API_KEY ($OPENAI_BASE_URL: any OpenAI-compatible server)
  --   model = "anthropic/claude-sonnet-5", -- $ANTHROPIC_API_KEY
  model = moor.testing.script(function(turn)
    local last = turn.messages[#turn.messages]
    if last.role == "tool" then return "greet answered " .. last.content end
    return { toolCalls = { { name = "greet", input = { name = last.content } } } }
  end),
  description = "A new moor agent.",
  instructions = "You greet people with the greet tool and set reminders with remind. Keep answers short.",
}
]]

local GREET = [[
-- A plain tool: execute runs once per call. `moor call greet '{"name": "Ada"}'`
$MOOR
local s = moor.schema

return moor.defineTool {
  description = "Greet someone by name.",
  inputSchema = s.object { name = s.string { minLength = 1, description = "who to greet" } },
  execute = function(input)
    return { greeting = "Hello, " .. input.name .. "!" }
  end,
}
]]

local REMIND = [[
-- A workflow tool: its body is durable. The step's result is recorded once;
-- the sleep holds no compute, and a moor killed during it finishes the run on
-- `moor resume` (or `moor dev`) without running the step again.
--   moor call remind '{"note": "stand up", "delay": "5s"}'
$MOOR
local s = moor.schema

local compose = moor.step("compose", function(note)
  return "Reminder: " .. note
end)

return moor.defineWorkflowTool {
  description = "Wait for a delay, then return a reminder of the note.",
  inputSchema = s.object {
    note = s.string { minLength = 1 },
    delay = s.optional(s.string { description = 'how long to wait, as "30s", "20m" or "4h" (default "1s")' }),
  },
  execute = function(input)
    local text = compose(input.note)
    coroutine.yield { phase = "waiting" } -- a progress snapshot
    moor.sleep(input.delay or "1s")
    return { reminder = text }
  end,
}
]]

local GREET_SPEC = [[
-- `moor test` runs every tests/lua/*_spec.lua inside the host, on a throwaway database.
$MOOR
local t = moor.testing
local greet = dofile("agent/tools/greet.lua")

describe("greet", function()
  it("greets by name", function()
    local result, err = t.call(greet, { name = "Ada" })
    assert.is_nil(err)
    assert.are.same({ greeting = "Hello, Ada!" }, result)
  end)

  it("refuses input without a name", function()
    local result, err = t.call(greet, {})
    assert.is_nil(result)
    assert.truthy(err.message:find("name", 1, true))
  end)
end)
]]

local REMIND_SPEC = [[
$MOOR
local t = moor.testing
local remind = dofile("agent/tools/remind.lua")

local function kinds(run_id)
  local out = {}
  for _, e in ipairs(t.events(run_id)) do out[#out + 1] = e.kind end
  return out
end

describe("remind", function()
  it("records its step, sleeps durably, then answers", function()
    local result, err, run_id = t.call(remind, { note = "stand up", delay = "20ms" })
    assert.is_nil(err)
    assert.are.same({ reminder = "Reminder: stand up" }, result)
    assert.are.same({ "run.started", "step.result", "progress", "timer.scheduled", "timer.fired", "run.completed" },
      kinds(run_id))
  end)

  it("survives a restart during its sleep without running the step again", function()
    local run_id = t.start(remind, { note = "water the plants", delay = "50ms" })
    t.step() -- the step runs and the sleep begins
    local result, err = t.restart(run_id) -- forget the run, replay it from its log, drive it on
    assert.is_nil(err)
    assert.are.same({ reminder = "Reminder: water the plants" }, result)
    local steps = 0
    for _, kind in ipairs(kinds(run_id)) do
      if kind == "step.result" then steps = steps + 1 end
    end
    assert.are.equal(1, steps)
  end)
end)
]]

local GITIGNORE = [[
# moor's database and lock (moor call, moor dev)
.moor/
]]

-- The templates' `$MOOR` is the line that opens the authoring API, written
-- in as each file is: no module under lua/ requires the face `moor`, and
-- tests/e2e/test_layout.sh checks every line here too (it lists this one).
local MOOR = ('local moor = %s "moor"'):format("require")

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' or c == "\\" then return "\\" .. c end
    return ("\\u%04x"):format(c:byte())
  end) .. '"'
end

-- The language server reads moor's annotations (lua/moor/meta/) from the
-- moor that wrote this file: its install prefix or its source tree.
local function luarc(lua_dir)
  return ([[
{
  "$schema": "https://raw.githubusercontent.com/LuaLS/vscode-lua/master/setting/schema.json",
  "runtime.version": "Lua 5.4",
  "runtime.path": ["?.lua", "?/init.lua", "agent/?.lua", "agent/lib/?.lua"],
  "workspace.library": [%s],
  "workspace.checkThirdParty": false,
  "diagnostics.globals": ["describe", "it", "before_each", "after_each", "setup", "teardown", "pending",
    "finally", "spy", "stub", "mock"]
}
]]):format(json_string(lua_dir .. "/moor/meta"))
end

local function files(lua_dir)
  return {
    { "agent/agent.lua", AGENT },
    { "agent/tools/greet.lua", GREET },
    { "agent/tools/remind.lua", REMIND },
    { "tests/lua/greet_spec.lua", GREET_SPEC },
    { "tests/lua/remind_spec.lua", REMIND_SPEC },
    { ".luarc.json", luarc(lua_dir) },
    { ".gitignore", GITIGNORE },
  }
end

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

--- write(dir, { mkdir, create, lua_dir }) -> report
-- | nil, code ("exists" | "io"), message
function M.write(dir, opts)
  dir = (dir == nil or dir == "") and "." or dir:gsub("(.)/+$", "%1")
  local list = files(opts.lua_dir)
  local taken = {}
  for _, f in ipairs(list) do
    local path = dir .. "/" .. f[1]
    if exists(path) then taken[#taken + 1] = path end
  end
  if #taken > 0 then
    return nil, "exists", ("moor init writes nothing over existing files: %s %s; move %s away or pick another "
      .. "directory"):format(table.concat(taken, ", "), #taken == 1 and "exists" or "exist",
      #taken == 1 and "it" or "them")
  end
  for _, sub in ipairs { "", "/agent", "/agent/tools", "/tests", "/tests/lua" } do
    local ok, err = opts.mkdir(dir .. sub)
    if not ok then return nil, "io", err end
  end
  local lines = {}
  for _, f in ipairs(list) do
    local path = dir .. "/" .. f[1]
    -- (create: O_EXCL, so a file that appeared meanwhile stays as it is)
    local ok, err, code = opts.create(path, (f[2]:gsub("%$MOOR", MOOR)))
    if not ok then return nil, code == "exists" and "exists" or "io", err end
    lines[#lines + 1] = "  " .. path
  end
  local cd = dir == "." and "" or ("cd %s && "):format(dir)
  return ("wrote a new agent:\n%s\ntry:\n  %smoor call greet '{\"name\": \"Ada\"}'\n"
    .. "  %smoor call remind '{\"note\": \"stand up\", \"delay\": \"5s\"}'\n  %smoor test\n  %smoor chat\n")
    :format(table.concat(lines, "\n"), cd, cd, cd, cd)
end

return M
