-- An embedding example: a "game loop" at 60 frames per second in a stock
-- lua5.4 with moor as a Lua module (build/lua/moor/core.so), giving the
-- engine a budget of each frame (moor.tick(budget_ms)). Runs sleep (work
-- with a nap), ask (quiz: the loop answers a few frames after a question
-- appears) and complete; one long run (3,000 steps) is spread over frames.
-- Prints the engine's cost per frame (median, p99, max µs); fails when a
-- run did not end as expected or the frames ran out (not on time).
--
--   MOOR_DB=... lua5.4 tests/embed/game.lua AGENT_DIR [BUDGET_MS [MAX_FRAMES]]
local moor = require "moor"
local core = require "moor.core"

local agent_dir = assert(arg[1], "usage: game.lua AGENT_DIR [BUDGET_MS [MAX_FRAMES]]")
local budget_ms = tonumber(arg[2] or "2")
local max_frames = math.tointeger(tonumber(arg[3] or "3600"))

assert(moor.load(agent_dir))

local NNAP, NQUIZ, ANSWER_AFTER = 4, 4, 5
local runs = { { id = assert(moor.call("work", { n = 3000 })), want = "3000" } }
for i = 1, NNAP do
  runs[#runs + 1] = { id = assert(moor.call("work", { n = 10 * i, nap = ("%dms"):format(50 * i) })),
                      want = tostring(10 * i) }
end
for i = 0, NQUIZ - 1 do
  runs[#runs + 1] = { id = assert(moor.call("quiz", { n = i })),
                      want = i % 2 == 1 and '"answered right"' or '"answered left"' }
end

local function all_ended()
  for _, r in ipairs(runs) do
    if moor.status(r.id) == "running" then return false end
  end
  return true
end

local frame_us = 1000000 // 60
local costs, seen, asked = {}, {}, 0
local left_work = 0
local next_frame = core.mono()
local frame = 0
while frame < max_frames and not all_ended() do
  frame = frame + 1
  -- The game's own work would go here; then the engine's share.
  local t0 = core.mono()
  local due = moor.tick(budget_ms)
  costs[frame] = core.mono() - t0
  if due == 0 then left_work = left_work + 1 end
  -- A player answers each question a few frames after it appeared.
  for _, q in ipairs(moor.inputs()) do
    local s = seen[q.requestId]
    if not s then
      seen[q.requestId] = frame
      asked = asked + 1
    elseif frame - s >= ANSWER_AFTER then
      local n = tonumber(q.request.prompt:match("Question (%d+)"))
      assert(moor.answer(q.requestId, { optionId = n % 2 == 1 and "right" or "left" }))
    end
  end
  next_frame = next_frame + frame_us
  local wait = next_frame - core.mono()
  if wait > 0 then core.wait(wait // 1000) end -- (core.wait also turns the engine's libuv loop)
end

table.sort(costs)
local n = #costs
print(("Lua game loop: %d frames at 60 fps, %d runs, budget %g ms a frame (%d frames left work for the next)")
  :format(n, #runs, budget_ms, left_work))
if n > 0 then
  print(("  engine per frame: median %d us, p99 %d us, max %d us")
    :format(costs[n // 2 + 1], costs[math.min(n, n * 99 // 100 + 1)], costs[n]))
end
for _, r in ipairs(runs) do
  local status, result = moor.status(r.id)
  assert(status == "completed" and result == r.want,
    ("run %s is %s %s, wanted completed %s"):format(r.id, tostring(status), tostring(result), r.want))
end
assert(asked == NQUIZ, ("%d questions seen, wanted %d"):format(asked, NQUIZ))
assert(frame < max_frames, ("the runs did not end within %d frames"):format(max_frames))
assert(left_work > 0, "no frame left work for the next: the budget never cut a round")
print("ok: every run completed")
