-- The store's checkpoints (issue 13: a budgeted tick never exceeds its
-- budget by more than one step's work): SQLite's automatic checkpoint ran
-- inside the commit that took the WAL past 1,000 frames, on the engine's
-- thread; host/store.c runs it on a thread of its own with a second
-- connection. After a few thousand frames of commits, with pauses between
-- bursts as a host has, the thread has run checkpoints, no commit ran one,
-- and the WAL started over each time: its file holds about one burst.
-- (tests/c/test_store.c covers commits that never pause; tests/e2e/
-- test_kill_checkpoint.sh a kill -9 while it runs.)
local moor = require "moor"
local core = require "moor.core"
local t = moor.testing
local s = moor.schema

local chunk = string.rep("0123456789abcdef", 768) -- 12 KiB: about 4 WAL frames a step

local big = moor.step("big", function(i) return { i = i, text = chunk } end)

local bursts = moor.defineWorkflowTool {
  description = "spec tool", inputSchema = s.object { n = s.integer() },
  execute = function(input)
    local n = 0
    for i = 1, input.n do n = n + #big(i).text end
    return n
  end,
}

local function wal_size()
  local f = io.open(core.db_path() .. "-wal", "rb")
  if not f then return 0 end
  local size = f:seek("end")
  f:close()
  return size
end

-- Until the thread has run more than `n` checkpoints and is idle, every
-- commit so far checkpointed (at most 5 s).
local function await_checkpoints(n)
  for _ = 1, 250 do
    local st = core.store_stats()
    if st.checkpoints > n and not st.checkpointing then return true end
    os.execute("sleep 0.02")
  end
  return false
end

-- One run of 200 steps (about 1,300 frames; the WAL may start over while
-- it runs, when the thread's checkpoint ends between two of its commits),
-- then a pause until the thread is idle: the frames in the WAL at its end.
local function burst(k)
  local before = core.store_stats().checkpoints
  assert.are.equal(200 * #chunk, (t.call(bursts, { n = 200 })), "burst " .. k)
  local frames = core.store_stats().wal_frames
  assert.is_true(await_checkpoints(before), "the thread ran a checkpoint after burst " .. k)
  return frames
end

describe("the store's checkpoints", function()
  it("run on their own thread, and the WAL starts over after each", function()
    local st = core.store_stats()
    assert.is_true(st.checkpointer, "checkpoints run on a thread of their own")
    local threshold = st.checkpoint_frames
    assert.are.equal(1000, threshold)
    local frame = core.query("PRAGMA page_size")[1].page_size + 24
    burst(0) -- (whatever specs before left in the WAL is in the file now)
    local size0 = wal_size()
    local inline0, ckpt0 = core.store_stats().checkpoints_inline, core.store_stats().checkpoints
    local restarts0 = core.store_stats().wal_restarts
    local frames = {}
    for k = 1, 4 do
      frames[k] = burst(k)
      -- the WAL started over after the last checkpoint, where it would hold every burst's frames
      assert.is_true(frames[k] < 2 * threshold, ("burst %d left %d frames"):format(k, frames[k]))
    end
    st = core.store_stats()
    assert.is_true(st.checkpoints - ckpt0 >= 4, "checkpoints run: " .. st.checkpoints - ckpt0)
    assert.are.equal(inline0, st.checkpoints_inline, "no commit ran a checkpoint itself")
    assert.are.equal(0, st.checkpoints_finish, "nor finished one (MOOR_STORE_CHECKPOINT_FINISH_FRAMES is off)")
    assert.is_true(st.wal_restarts - restarts0 >= 4,
      "the WAL started over after each burst: " .. st.wal_restarts - restarts0)
    -- The bursts' payloads alone take 4 x 200 x 12 KiB: over 2,400 pages. The
    -- file (as large as the WAL ever was) holds no more than 2,000 frames, or
    -- what it held before them.
    local size = wal_size()
    assert.is_true(size <= math.max(size0, 32 + 2 * threshold * frame),
      ("the WAL file is %d bytes (%d frames; %d before the bursts)"):format(size, size // frame, size0 // frame))
  end)
end)
