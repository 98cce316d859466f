-- Result sizes (issue 7, item 18): the 64 KiB cap is seed 001's, for the
-- tools of harness agents; model answers, steps and tool results may be as
-- large as engine.MAX_RESULT ($MOOR_MAX_RESULT, 16 MiB by default), and large
-- values live in the blobs table, read back by replay.
local moor = require "moor"
local engine = require "moor.engine"
local core = require "moor.core"
local support = dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "support.lua")
local t = moor.testing
local s = moor.schema

local function workflow(execute)
  return moor.defineWorkflowTool { description = "spec tool", inputSchema = s.object {}, execute = execute }
end

local register = support.register

local kinds = support.kinds

describe("result sizes", function()
  it("keeps 64 KiB only as the harness-agent tool limit; the general limit is 16 MiB", function()
    assert.are.equal(64 * 1024, engine.HARNESS_TOOL_MAX_RESULT)
    assert.is_true(engine.MAX_RESULT >= 16 * 1024 * 1024 or os.getenv("MOOR_MAX_RESULT") ~= nil)
  end)

  it("completes a scripted-model turn whose answer is 300 KB", function()
    local answer = string.rep("a", 300 * 1000)
    local c = t.converse(moor.defineAgent { instructions = "x", model = t.script { answer } }, { "write a lot" })
    local done = kinds(c.events, "message.completed")
    assert.are.equal(1, #done, "the turn failed: " .. tostring((kinds(c.events, "turn.failed")[1] or {}).error
      and kinds(c.events, "turn.failed")[1].error.message))
    assert.are.equal(#answer, #done[1].text)
  end)

  it("hands the model a 200 KB content part from a plain tool", function()
    local data = string.rep("QUJD", 50 * 1000) -- 200 KB of base64
    register("big_shot", moor.defineTool {
      description = "A large screenshot.",
      inputSchema = s.object {},
      execute = function() return { base64 = data } end,
      toModelOutput = function(out)
        return moor.toolOutput.content { moor.toolOutputPart.file(out.base64, { mediaType = "image/png" }) }
      end,
    })
    local seen
    local c = t.converse(moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then return { toolCalls = { { name = "big_shot", input = {} } } } end
        seen = turn.messages[#turn.messages].content
        return "seen"
      end),
    }, { "look" })
    assert.truthy(seen, "the model never saw the tool result")
    assert.are.equal("file", seen[1].type)
    assert.are.equal(#data, #seen[1].data)
    assert.are.equal(0, #kinds(c.events, "warning")) -- under 3 MiB: no warning
  end)

  it("warns above 3 MiB of content parts, and still hands them to the model", function()
    local data = string.rep("QUJD", 800 * 1024) -- 3.2 MiB of base64
    register("huge_shot", moor.defineTool {
      description = "A huge screenshot.",
      inputSchema = s.object {},
      execute = function() return data end,
      toModelOutput = function(out)
        return moor.toolOutput.content { moor.toolOutputPart.file(out, { mediaType = "image/png" }) }
      end,
    })
    local seen
    local c = t.converse(moor.defineAgent {
      instructions = "x",
      model = t.script(function(turn)
        if turn.n == 1 then return { toolCalls = { { name = "huge_shot", input = {} } } } end
        seen = turn.messages[#turn.messages].content
        return "seen"
      end),
    }, { "look" })
    assert.are.equal(#data, type(seen) == "table" and #seen[1].data or -1)
    local warnings = kinds(c.events, "warning")
    assert.are.equal(1, #warnings)
    assert.truthy(warnings[1].message:find("over 3 MiB", 1, true))
  end)

  it("fails a result over the limit with a message naming the limit and how to raise it", function()
    local saved = engine.MAX_RESULT
    engine.MAX_RESULT = 256 * 1024
    local big = moor.step("rs_big", function() return string.rep("x", 300 * 1024) end)
    local ok1, res, err = pcall(t.call, workflow(function() return big() end), {})
    local ok2, res2, err2 = pcall(t.call, workflow(function() return string.rep("y", 300 * 1024) end), {})
    engine.MAX_RESULT = saved
    assert.is_true(ok1, res)
    assert.is_nil(res)
    assert.are.equal("FatalError", err.code)
    assert.truthy(err.message:find("262144-byte limit", 1, true), err.message)
    assert.truthy(err.message:find("MOOR_MAX_RESULT", 1, true), err.message)
    assert.is_true(ok2, res2)
    assert.is_nil(res2)
    assert.are.equal("ResultTooLarge", err2.code)
    assert.truthy(err2.message:find("MOOR_MAX_RESULT", 1, true), err2.message)
    assert.truthy(err2.message:find("return a summary", 1, true), err2.message)
  end)

  it("fails a turn whose model answer is over the limit, saying so", function()
    local saved = engine.MAX_RESULT
    engine.MAX_RESULT = 128 * 1024
    local ok, c = pcall(t.converse, moor.defineAgent { instructions = "x",
      model = t.script { string.rep("b", 200 * 1024) } }, { "too much" })
    engine.MAX_RESULT = saved
    assert.is_true(ok, c)
    local failed = kinds(c.events, "turn.failed")
    assert.are.equal(1, #failed)
    assert.truthy(failed[1].error.message:find("131072-byte limit", 1, true), failed[1].error.message)
  end)

  it("stores a 1 MiB step result outside the event row and replays it", function()
    local calls = 0
    local value = string.rep("z", 1024 * 1024)
    local big = moor.step("rs_replay", function() calls = calls + 1; return value end)
    local id = assert(t.start(workflow(function()
      local v = big()
      moor.createHook { token = "rs-replay" }:await()
      return { n = #v, head = v:sub(1, 3) }
    end)))
    t.drive(id)
    assert.are.equal(1, calls)
    local row = core.query("SELECT length(payload) AS n FROM events WHERE run_id=? AND kind='step.result'", id)[1]
    assert.is_true(row.n < 1024, "the 1 MiB value sits in the event row")
    local blob = core.query("SELECT length(payload) AS n FROM blobs WHERE run_id=?", id)[1]
    assert.truthy(blob and blob.n > 1024 * 1024, "no blob row")
    local evs = t.events(id)
    local shown = kinds(evs, "step.result")[1]
    assert.are.equal(#value, #shown) -- engine.events reads it back
    t.restart(id)
    assert.is_true((t.deliver("rs-replay", {})) ~= nil)
    t.drive(id)
    local res, err = t.outcome(id)
    assert.is_nil(err)
    assert.are.equal(#value, res.n)
    assert.are.equal("zzz", res.head)
    assert.are.equal(1, calls)
  end)

  it("keeps a small result in the event row (the path it always took)", function()
    local small = moor.step("rs_small", function() return "tiny" end)
    local _, _, id = t.call(workflow(function() return small() end), {})
    local row = core.query("SELECT payload FROM events WHERE run_id=? AND kind='step.result'", id)[1]
    assert.are.equal('"tiny"', row.payload)
    assert.is_nil(core.query("SELECT 1 AS x FROM blobs WHERE run_id=?", id)[1])
  end)
end)
